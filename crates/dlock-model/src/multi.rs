//! The multi-lock (`Client::multi_lock`): one hold over several names, each name's key
//! with the mutex's string hold, each name its own fence. Its two scripts as transitions
//! over several names' keys ([`multi_acquire`], [`multi_release`], mirroring
//! multi/acquire.lua and multi/release.lua), and a model of clients taking two names:
//! on one server (one script takes both or neither) and across two Cluster slots (one
//! script per slot, slots taken in one order, a busy slot giving back the slots taken
//! before it, in a step of its own).
//!
//! A plain mutex client takes the last name now and then (so a multi-lock meets a name
//! busy and the other free). The properties: *mutual exclusion per name*; *beliefs are backed by Redis* (a client
//! that believes it holds has every name's key); *a multi-lock holds names only while
//! taking or holding them* (a waiting or finished client holds none: no wait while
//! holding a part, which two multi-locks over overlapping names would turn into a
//! deadlock until a lease ran out); *fences follow grants* (per name); *a resend answers
//! the grant's fences*.

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

/// The bugs of the multi-lock's scripts and of its steps across slots.
pub const MULTI_MUTANTS: [Mutant; 4] = [
    Mutant::MultiGrantsPart,
    Mutant::MultiKeepsPart,
    Mutant::MultiReleasesOneName,
    Mutant::MultiResendRedraws,
];

/// What multi/acquire.lua answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MultiGrant {
    /// Every name granted, with each name's fence in the order asked.
    Granted(Vec<u64>),
    /// A name held by another token: nothing taken (names of this token given back).
    Busy,
}

/// multi/acquire.lua over the names `names` (indices into `servers`, one `Server` per
/// name): when some name is held by another token, the names this token holds are
/// released as a string hold's release does (queue.lua `release_exclusive`: handed to the
/// first in line, or deleted) and the answer is busy; otherwise every name is granted,
/// a name already this token's keeping its last fence with its lease restarted, a free
/// one drawing a new fence. (A free name is taken whoever waits in its fair queue: the
/// multi-lock does not queue.)
pub fn multi_acquire(
    servers: &mut [Server],
    names: &[usize],
    token: Token,
    now: Time,
    ttl: Time,
    mutants: &[Mutant],
) -> MultiGrant {
    let busy = names
        .iter()
        .any(|&n| servers[n].holder(now).is_some_and(|holder| holder != token));
    if busy && !mutants.contains(&Mutant::MultiGrantsPart) {
        for &n in names {
            if servers[n].holder(now) == Some(token) {
                servers[n].fair_release(token, now, ttl, mutants);
            }
        }
        return MultiGrant::Busy;
    }
    let mut fences = Vec::with_capacity(names.len());
    for &n in names {
        let server = &mut servers[n];
        match server.holder(now) {
            Some(holder) if holder == token => {
                server.lock = Some((token, now + ttl)); // PEXPIRE
                let fence = if mutants.contains(&Mutant::MultiResendRedraws) {
                    server.draw_fence(mutants)
                } else {
                    server.counter // last_fence
                };
                fences.push(fence);
            }
            // (The mutant only: a busy name is skipped, the free ones taken.)
            Some(_) => {}
            None => {
                fences.push(server.draw_fence(mutants));
                server.lock = Some((token, now + ttl));
            }
        }
    }
    if busy {
        return MultiGrant::Busy;
    }
    MultiGrant::Granted(fences)
}

/// multi/release.lua over `names`: each name the token holds is released as a string
/// hold's release does (`release_exclusive`); returns how many were its own, and the
/// waiter each release handed a name to (with its fence).
pub fn multi_release(
    servers: &mut [Server],
    names: &[usize],
    token: Token,
    now: Time,
    ttl: Time,
    mutants: &[Mutant],
) -> (usize, Vec<Option<(Token, u64)>>) {
    let mut released = 0;
    let mut handed = Vec::with_capacity(names.len());
    for (i, &n) in names.iter().enumerate() {
        if i > 0 && mutants.contains(&Mutant::MultiReleasesOneName) {
            handed.push(None);
            continue;
        }
        let (ours, to) = if servers[n].holder(now) == Some(token) {
            servers[n].fair_release(token, now, ttl, mutants)
        } else {
            (false, None)
        };
        released += usize::from(ours);
        handed.push(to);
    }
    (released, handed)
}

/// Where a client of the model is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not taking anything (before its first attempt, or after a release).
    Idle,
    /// In an attempt sent at `sent`, the groups before `group` granted.
    Taking {
        /// The next group to take.
        group: usize,
        /// The fences of the groups granted so far.
        fences: Vec<u64>,
    },
    /// A busy group answered: the groups before `group` are being given back.
    GivingBack {
        /// The busy group.
        group: usize,
    },
    /// Between attempts (the last one busy).
    Waiting,
    /// Granted: believes it holds every name until `until`, with these fences.
    Holding {
        /// The end of its validity (the attempt's send plus the lease).
        until: Time,
        /// Each name's fence.
        fences: Vec<u64>,
    },
}

/// One client of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// Attempts begun (each wait is one token).
    pub waits: u8,
    /// When its current attempt was sent.
    pub sent: Time,
    /// Its current wait found the names busy at least once.
    pub waited: bool,
    /// Attempts sent, over all its waits: across slots each attempt that takes a slot
    /// and gives it back draws a fence, so retries must be bounded for the search to end.
    pub tries: u8,
}

impl Client {
    fn token(&self, c: usize) -> Token {
        Token {
            client: c as u8,
            attempt: self.waits.saturating_sub(1),
        }
    }
}

/// A state of the multi-lock model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock.
    pub now: Time,
    /// Each name's keys.
    pub servers: Vec<Server>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Per name, the largest fence granted so far.
    pub granted: Vec<u64>,
    /// A grant's fence was not larger than every earlier grant's of its name.
    pub fence_went_back: bool,
    /// A resend answered fences other than its grant's.
    pub resend_changed_fences: bool,
    /// A client was granted after it waited.
    pub granted_after_waiting: bool,
    /// The plain mutex client of the last name: its holds begun, and the end of its
    /// validity while it holds.
    pub mutex: (u8, Option<Time>),
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves a tick.
    Tick,
    /// Client `c` begins a wait (a new token), or, waiting, attempts again.
    Attempt(usize),
    /// Client `c` sends its attempt's next group.
    Take(usize),
    /// Client `c` gives back the groups granted before the busy one.
    GiveBack(usize),
    /// Client `c`, holding, resends group `g` of its grant (a lost reply).
    Resend(usize, usize),
    /// Client `c` releases every name.
    Release(usize),
    /// The mutex client tries the last name (fence at grant).
    MutexLock,
    /// The mutex client releases it.
    MutexUnlock,
}

/// Two clients each taking both of two names, each client's waits bounded.
#[derive(Clone, Debug)]
pub struct MultiModel {
    /// The model's name.
    pub name: &'static str,
    /// The groups, in the order every client takes them: `[[0, 1]]` on one server, or
    /// `[[0], [1]]` across two Cluster slots.
    pub groups: Vec<Vec<usize>>,
    /// Clients.
    pub clients: usize,
    /// The lease, in ticks.
    pub ttl: Time,
    /// The clock stops here.
    pub max_time: Time,
    /// Waits each client may begin.
    pub max_waits: u8,
    /// Attempts each client may send, over all its waits.
    pub max_tries: u8,
    /// Holds the plain mutex client of the last name may take (0: no such client).
    pub mutex_holds: u8,
    /// Bugs put in.
    pub mutants: Vec<Mutant>,
}

impl MultiModel {
    /// Whether `mutant` acts in this model's transitions.
    pub fn touched_by(&self, mutant: Mutant) -> bool {
        match mutant {
            Mutant::MultiKeepsPart => self.groups.len() > 1,
            Mutant::MultiGrantsPart | Mutant::MultiReleasesOneName => {
                self.groups.iter().any(|group| group.len() > 1)
            }
            Mutant::MultiResendRedraws => true,
            _ => false,
        }
    }

    fn names(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }

    /// The mutex client's token for its hold `n`.
    fn mutex_token(&self, n: u8) -> Token {
        Token {
            client: self.clients as u8,
            attempt: n,
        }
    }
}

impl State {
    /// The names `c` believes it holds now (every name while its validity lasts).
    fn believes(&self, c: usize) -> bool {
        matches!(self.clients[c].phase, Phase::Holding { until, .. } if until > self.now)
    }
}

impl Model for MultiModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            phase: Phase::Idle,
            waits: 0,
            sent: 0,
            waited: false,
            tries: 0,
        };
        vec![State {
            now: 0,
            servers: vec![Server::default(); self.names()],
            clients: vec![client; self.clients],
            granted: vec![0; self.names()],
            fence_went_back: false,
            resend_changed_fences: false,
            granted_after_waiting: false,
            mutex: (0, None),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        match state.mutex {
            (_, Some(_)) => actions.push(Action::MutexUnlock),
            (begun, None) if begun < self.mutex_holds => actions.push(Action::MutexLock),
            _ => {}
        }
        for (c, client) in state.clients.iter().enumerate() {
            match &client.phase {
                Phase::Idle if client.waits < self.max_waits => actions.push(Action::Attempt(c)),
                Phase::Idle => {}
                Phase::Waiting if client.tries < self.max_tries => actions.push(Action::Attempt(c)),
                Phase::Waiting => {}
                Phase::Taking { .. } => actions.push(Action::Take(c)),
                Phase::GivingBack { .. } => actions.push(Action::GiveBack(c)),
                Phase::Holding { .. } => {
                    actions.push(Action::Release(c));
                    if state.believes(c) {
                        for g in 0..self.groups.len() {
                            actions.push(Action::Resend(c, g));
                        }
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let (now, ttl, m) = (state.now, self.ttl, &self.mutants[..]);
        match action {
            Action::Tick => {
                state.now += 1;
                for server in &mut state.servers {
                    server.expire(state.now);
                }
            }
            Action::Attempt(c) => {
                let client = &mut state.clients[c];
                if client.phase == Phase::Idle {
                    client.waits += 1;
                    client.waited = false;
                }
                client.sent = now;
                client.tries += 1;
                client.phase = Phase::Taking {
                    group: 0,
                    fences: Vec::new(),
                };
            }
            Action::Take(c) => {
                let Phase::Taking { group, mut fences } = state.clients[c].phase.clone() else {
                    return None;
                };
                let token = state.clients[c].token(c);
                let names = &self.groups[group];
                let free: Vec<bool> = (names.iter())
                    .map(|&n| state.servers[n].holder(now).is_none())
                    .collect();
                match multi_acquire(&mut state.servers, names, token, now, ttl, m) {
                    MultiGrant::Granted(drawn) => {
                        for ((&n, &fence), free) in names.iter().zip(&drawn).zip(free) {
                            // A name taken free draws a fence larger than every earlier
                            // grant's; one already ours keeps its own.
                            let floor = state.granted[n];
                            if fence < floor || (free && fence == floor) {
                                state.fence_went_back = true;
                            }
                            state.granted[n] = floor.max(fence);
                        }
                        fences.extend(drawn);
                        let client = &mut state.clients[c];
                        client.phase = if group + 1 < self.groups.len() {
                            Phase::Taking {
                                group: group + 1,
                                fences,
                            }
                        } else {
                            state.granted_after_waiting |= client.waited;
                            Phase::Holding {
                                until: client.sent + ttl,
                                fences,
                            }
                        };
                    }
                    MultiGrant::Busy => {
                        let keeps = m.contains(&Mutant::MultiKeepsPart);
                        let client = &mut state.clients[c];
                        client.waited = true;
                        client.phase = if group > 0 && !keeps {
                            Phase::GivingBack { group }
                        } else {
                            Phase::Waiting
                        };
                    }
                }
            }
            Action::GiveBack(c) => {
                let Phase::GivingBack { group } = state.clients[c].phase else {
                    return None;
                };
                let token = state.clients[c].token(c);
                for names in self.groups[..group].iter().rev() {
                    multi_release(&mut state.servers, names, token, now, ttl, m);
                }
                state.clients[c].phase = Phase::Waiting;
            }
            Action::Resend(c, g) => {
                let Phase::Holding { fences, .. } = &state.clients[c].phase else {
                    return None;
                };
                let start: usize = self.groups[..g].iter().map(Vec::len).sum();
                let expected = fences[start..start + self.groups[g].len()].to_vec();
                let token = state.clients[c].token(c);
                let answer = multi_acquire(&mut state.servers, &self.groups[g], token, now, ttl, m);
                if answer != MultiGrant::Granted(expected) {
                    state.resend_changed_fences = true;
                }
            }
            Action::MutexLock => {
                let token = self.mutex_token(state.mutex.0);
                let last = self.names() - 1;
                let server = &mut state.servers[last];
                let free = server.holder(now).is_none();
                if let Grant::Granted(Some(fence)) = server.mutex_acquire(token, now, ttl, true, m)
                {
                    if fence < state.granted[last] || (free && fence == state.granted[last]) {
                        state.fence_went_back = true;
                    }
                    state.granted[last] = state.granted[last].max(fence);
                    state.mutex = (state.mutex.0 + 1, Some(now + ttl));
                }
            }
            Action::MutexUnlock => {
                let token = self.mutex_token(state.mutex.0.saturating_sub(1));
                let last = self.names() - 1;
                state.servers[last].mutex_release(token, now, m);
                state.mutex.1 = None;
            }
            Action::Release(c) => {
                let token = state.clients[c].token(c);
                for names in &self.groups {
                    multi_release(&mut state.servers, names, token, now, ttl, m);
                }
                state.clients[c].phase = Phase::Idle;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion per name", |_, state: &State| {
                // Every client that believes holds every name: two at once share them; and
                // the mutex client holds the last one.
                let mutex = matches!(state.mutex.1, Some(until) if until > state.now);
                (0..state.clients.len())
                    .filter(|&c| state.believes(c))
                    .count()
                    + usize::from(mutex)
                    <= 1
            }),
            Property::always("beliefs are backed by Redis", |_, state: &State| {
                (0..state.clients.len())
                    .filter(|&c| state.believes(c))
                    .all(|c| {
                        let token = state.clients[c].token(c);
                        (state.servers.iter()).all(|server| server.holder(state.now) == Some(token))
                    })
            }),
            Property::always(
                "a multi-lock holds names only while taking or holding them",
                |_, state: &State| {
                    state.clients.iter().enumerate().all(|(c, client)| {
                        let idle = matches!(client.phase, Phase::Idle | Phase::Waiting);
                        !idle
                            || (state.servers.iter()).all(|server| {
                                server
                                    .holder(state.now)
                                    .is_none_or(|holder| holder.client != c as u8)
                            })
                    })
                },
            ),
            Property::always("fences follow grants", |_, state: &State| {
                !state.fence_went_back
            }),
            Property::always("a resend answers the grant's fences", |_, state: &State| {
                !state.resend_changed_fences
            }),
            Property::sometimes(
                "a multi-lock is granted after waiting",
                |_, state: &State| state.granted_after_waiting,
            ),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.max_time
    }
}

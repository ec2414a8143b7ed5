//! Two locks side by side whose names look alike (`acct` and `{acct}`, `x{t}y` and `{t}`,
//! `{t}` and `{t}:data`), on one keyspace: each lock's keys and channels are named by the
//! library itself (`dlock::__lock_names`, the naming every kind uses), and the clients of
//! both (fair mutexes: attempts that wait in line, next attempts, releases that hand the
//! lock on, an operator's forced release of each) act on whatever those names point at.
//! Where two names meet, the two locks share what is stored there, as Redis would.
//!
//! The properties: *each lock's keys are its own* (no step of one lock names a key or a
//! channel a step of the other named, and no name the library gives one lock, those no
//! step here uses as `fenced` included, is one of the other's), *each lock's names are
//! distinct*, *each companion names its own lock* (the library's `companion_owner` reads
//! every companion `__lock_names` gives back to its lock), and *mutual exclusion per
//! name*. The state space is tiny on purpose: this is about which keys the two locks
//! touch, not about the interleavings of one lock, which the other models search.

use stateright::{Model, Property};

use crate::admin::Forced;
use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

/// The names one lock's scripts use, as indices into its pair's distinct names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slots {
    /// The lock key.
    pub key: usize,
    /// The fencing counter.
    pub fence: usize,
    /// The waiter queue.
    pub queue: usize,
    /// The waiter leases.
    pub leases: usize,
    /// The record of the last forced release.
    pub forced: usize,
    /// The expiry index of read holds or permits (a forced release deletes it).
    pub expiry: usize,
    /// The release channel.
    pub released: usize,
    /// The wake channels' prefix.
    pub wake: usize,
    /// An election's observers' channel (a forced release tells them).
    pub leader: usize,
}

impl Slots {
    /// Every name this model's steps use.
    fn each(&self) -> [usize; 9] {
        [
            self.key,
            self.fence,
            self.queue,
            self.leases,
            self.forced,
            self.expiry,
            self.released,
            self.wake,
            self.leader,
        ]
    }
}

/// Two look-alike lock names and what their scripts name.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The two lock names.
    pub locks: [String; 2],
    /// Every distinct key and channel name the two locks use.
    pub names: Vec<String>,
    /// Each lock's names.
    pub slots: [Slots; 2],
    /// Every name `dlock::__lock_names` gives each lock, as indices into `names` (the
    /// slots' and those no step of this model uses, as `fenced`).
    pub all: [Vec<usize>; 2],
    /// Every companion of each lock reads back (`dlock::companion_owner`) to its own key.
    pub owners_agree: bool,
    /// Each lock's names differ from each other (no two of its keys or channels meet).
    pub distinct: bool,
}

/// The names `dlock::__lock_names` gives that are channels, not keys (no companion to read
/// back to its lock).
const CHANNELS: [&str; 2] = ["released", "wake:"];

impl Pair {
    /// The pair `a`, `b` as the library names their keys (`shared_companion`: by the
    /// scheme before issue 32, `K:suffix` for a tagged key `K`).
    pub fn new(a: &str, b: &str, shared_companion: bool) -> Pair {
        let mut names: Vec<String> = Vec::new();
        let mut owners_agree = true;
        let mut distinct = true;
        let mut slots_of = |lock: &str| {
            let named = dlock::__lock_names("", lock)
                .unwrap_or_else(|err| panic!("the library refuses the name {lock:?}: {err}"));
            let key = named[0].1.clone();
            // Every name the library gives the lock, not only those the steps below use:
            // each companion must read back to its lock, and no two may meet.
            let mut all = Vec::new();
            for (what, real) in &named {
                let name = if shared_companion && *what != "key" && key.contains('{') {
                    format!("{key}:{what}")
                } else {
                    real.clone()
                };
                // The lock's companion keys (its channels are no keys; `leader` is a key
                // too, an election's record).
                if *what != "key" && !CHANNELS.contains(what) {
                    owners_agree &= dlock::companion_owner(&name).as_deref() == Some(&key);
                }
                let at = match names.iter().position(|n| *n == name) {
                    Some(at) => at,
                    None => {
                        names.push(name);
                        names.len() - 1
                    }
                };
                distinct &= !all.contains(&at);
                all.push(at);
            }
            let slot = |what: &str| {
                let at = named.iter().position(|(w, _)| *w == what);
                all[at.unwrap_or_else(|| panic!("the library names no {what}"))]
            };
            let slots = Slots {
                key: slot("key"),
                fence: slot("fence"),
                queue: slot("queue"),
                leases: slot("queue-leases"),
                forced: slot("forced"),
                expiry: slot("expiry"),
                released: slot("released"),
                wake: slot("wake:"),
                leader: slot("leader"),
            };
            (slots, all)
        };
        let (slots_a, all_a) = slots_of(a);
        let (slots_b, all_b) = slots_of(b);
        Pair {
            locks: [a.to_string(), b.to_string()],
            names,
            slots: [slots_a, slots_b],
            all: [all_a, all_b],
            owners_agree,
            distinct,
        }
    }
}

/// What a name holds (a channel holds nothing).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// A string lock: its holder and when it expires.
    Lock(Token, Time),
    /// A fencing counter.
    Counter(u64),
    /// A waiter queue with its leases (kept at the queue's name).
    Queue(Vec<(Token, Time)>),
    /// The record of forced releases.
    Record(Vec<Forced>),
}

/// What a client believes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Has not asked yet.
    Idle,
    /// Waits in line with this token since this tick (0 once past a lease).
    Queued(Token, Time),
    /// Holds with this token until this tick (its own clock).
    Holding(Token, Time),
    /// Released (each client holds once).
    Done,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Which pair of names.
    pub pair: usize,
    /// The clock.
    pub now: Time,
    /// What each of the pair's names holds.
    pub keyspace: Vec<Option<Value>>,
    /// Clients 0 and 1 use the first lock, 2 and 3 the second.
    pub clients: Vec<Client>,
    /// A release handed the client the lock: the fence it was told, if it listens where
    /// the release published.
    pub told: Vec<Option<u64>>,
    /// Forced releases called, per lock.
    pub forced: [bool; 2],
    /// Ghost: which locks' steps named each name (bit 0: the first lock, bit 1: the second).
    pub touched: Vec<u8>,
    /// Ghost: tokens a forced release took from Redis.
    pub evicted: Vec<Token>,
    /// Ghost: both locks were believed held at once.
    pub both_held: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Client `c` attempts (mutex/fair_acquire.lua, waiting: a busy answer takes a place in line).
    Attempt(usize),
    /// Client `c`, in line, tries again with its token.
    Retry(usize),
    /// Client `c` hears that a release handed it the lock.
    Hear(usize),
    /// Client `c` releases (mutex/fair_release.lua: hands the lock to the first in line).
    Release(usize),
    /// The operator releases lock `l` by force.
    Force(usize),
}

/// Two look-alike locks on one keyspace.
#[derive(Clone, Debug)]
pub struct PairModel {
    /// Shown in reports.
    pub name: &'static str,
    /// The pairs of names searched (one initial state each).
    pub pairs: Vec<Pair>,
    /// The lease, in ticks (a waiter's lease is the same).
    pub ttl: Time,
    /// The clock stops here.
    pub max_time: Time,
    /// Bugs put in on purpose.
    pub mutants: Vec<Mutant>,
}

/// The clients of each lock.
const CLIENTS_PER_LOCK: usize = 2;

impl PairModel {
    /// The model over `names`, pairs of look-alike names, with `mutants`.
    pub fn new(
        name: &'static str,
        names: &[(&str, &str)],
        max_time: Time,
        mutants: &[Mutant],
    ) -> PairModel {
        let shared = mutants.contains(&Mutant::SharedCompanion);
        PairModel {
            name,
            pairs: names.iter().map(|(a, b)| Pair::new(a, b, shared)).collect(),
            ttl: 2,
            max_time,
            mutants: mutants.to_vec(),
        }
    }

    /// Whether `mutant`'s bug is in what this model runs: only the naming's (the bugs of
    /// the fair mutex's scripts are the fair mutex model's to find, and no forced release
    /// is resent here).
    pub fn touched_by(&self, mutant: Mutant) -> bool {
        matches!(mutant, Mutant::SharedCompanion)
    }

    /// Lock `l`'s keys read into the model's one-name `Server` (what is not a lock, a
    /// counter or a queue where one is wanted reads as missing: Redis would refuse it),
    /// and the forced-release record.
    fn load(&self, state: &State, l: usize) -> (Server, Vec<Forced>) {
        let slots = &self.pairs[state.pair].slots[l];
        let at = |slot: usize| state.keyspace[slot].as_ref();
        let server = Server {
            lock: match at(slots.key) {
                Some(Value::Lock(token, expires)) => Some((*token, *expires)),
                _ => None,
            },
            counter: match at(slots.fence) {
                Some(Value::Counter(n)) => *n,
                _ => 0,
            },
            queue: match at(slots.queue) {
                Some(Value::Queue(line)) => line.clone(),
                _ => Vec::new(),
            },
            ..Server::default()
        };
        let record = match at(slots.forced) {
            Some(Value::Record(r)) => r.clone(),
            _ => Vec::new(),
        };
        (server, record)
    }

    /// Writes lock `l`'s keys back, and notes the names its step used (`names`).
    fn store(
        &self,
        state: &mut State,
        l: usize,
        server: &Server,
        record: Vec<Forced>,
        names: &[usize],
    ) {
        let slots = &self.pairs[state.pair].slots[l];
        state.keyspace[slots.key] = server.lock.map(|(t, e)| Value::Lock(t, e));
        state.keyspace[slots.fence] =
            (server.counter > 0).then_some(Value::Counter(server.counter));
        state.keyspace[slots.queue] =
            (!server.queue.is_empty()).then(|| Value::Queue(server.queue.clone()));
        if !record.is_empty() {
            state.keyspace[slots.forced] = Some(Value::Record(record));
        }
        for &name in names {
            state.touched[name] |= 1 << l;
        }
    }

    /// A release of lock `l` handed `waiter` the lock: it is told on lock `l`'s wake
    /// channels, and hears it if it listens there (on its own lock's) and still waits.
    fn tell(&self, state: &mut State, l: usize, waiter: Token, fence: u64) {
        let c = usize::from(waiter.client);
        let slots = &self.pairs[state.pair].slots;
        let listens = slots[c / CLIENTS_PER_LOCK].wake == slots[l].wake;
        if listens && matches!(state.clients[c], Client::Queued(token, _) if token == waiter) {
            state.told[c] = Some(fence);
        }
    }
}

impl State {
    /// The holds clients believe valid now, no forced release having taken them: (lock,
    /// client).
    fn believed(&self) -> Vec<(usize, usize)> {
        (self.clients.iter().enumerate())
            .filter_map(|(c, client)| match *client {
                Client::Holding(token, until)
                    if until > self.now && !self.evicted.contains(&token) =>
                {
                    Some((c / CLIENTS_PER_LOCK, c))
                }
                _ => None,
            })
            .collect()
    }
}

impl Model for PairModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let clients = 2 * CLIENTS_PER_LOCK;
        (self.pairs.iter().enumerate())
            .map(|(pair, names)| State {
                pair,
                now: 0,
                keyspace: vec![None; names.names.len()],
                clients: vec![Client::Idle; clients],
                told: vec![None; clients],
                forced: [false; 2],
                touched: vec![0; names.names.len()],
                evicted: Vec::new(),
                both_held: false,
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle => actions.push(Action::Attempt(c)),
                Client::Queued(_, since) => {
                    actions.push(Action::Retry(c));
                    if state.told[c].is_some() && since + self.ttl > state.now {
                        actions.push(Action::Hear(c));
                    }
                }
                Client::Holding(..) => actions.push(Action::Release(c)),
                Client::Done => {}
            }
        }
        for l in 0..2 {
            if !state.forced[l] {
                actions.push(Action::Force(l));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        // The scripts run as they are: their bugs are the one-lock models' to find; the
        // bug searched for here is in the names.
        let m: &[Mutant] = &[];
        match action {
            Action::Tick => state.now += 1,
            Action::Attempt(c) | Action::Retry(c) => {
                let l = c / CLIENTS_PER_LOCK;
                let token = match state.clients[c] {
                    Client::Queued(token, _) => token,
                    _ => Token {
                        client: c as u8,
                        attempt: 0,
                    },
                };
                state.told[c] = None;
                let (mut server, record) = self.load(&state, l);
                let grant = server.fair_acquire(token, now, self.ttl, self.ttl, true, m);
                let s = &self.pairs[state.pair].slots[l];
                self.store(
                    &mut state,
                    l,
                    &server,
                    record,
                    &[s.key, s.fence, s.queue, s.leases],
                );
                state.clients[c] = match grant {
                    Grant::Granted(_) => {
                        state.evicted.retain(|t| *t != token);
                        Client::Holding(token, now + self.ttl)
                    }
                    Grant::Busy => Client::Queued(token, now),
                };
            }
            Action::Hear(c) => {
                let (Client::Queued(token, since), Some(_)) = (state.clients[c], state.told[c])
                else {
                    return None;
                };
                state.clients[c] = Client::Holding(token, since + self.ttl);
            }
            Action::Release(c) => {
                let Client::Holding(token, _) = state.clients[c] else {
                    return None;
                };
                let l = c / CLIENTS_PER_LOCK;
                let (mut server, record) = self.load(&state, l);
                let (_, handed) = server.fair_release(token, now, self.ttl, m);
                let s = &self.pairs[state.pair].slots[l];
                let names = [s.key, s.queue, s.leases, s.fence, s.wake];
                self.store(&mut state, l, &server, record, &names);
                if let Some((waiter, fence)) = handed {
                    self.tell(&mut state, l, waiter, fence);
                }
                state.clients[c] = Client::Done;
            }
            Action::Force(l) => {
                state.forced[l] = true;
                let (mut server, mut record) = self.load(&state, l);
                let held = server.holder(now);
                // Each lock's operator calls once: request ids of the two locks differ.
                server.force_release(&mut record, l as u8, now, m);
                let s = &self.pairs[state.pair].slots[l];
                let names = [
                    s.key, s.fence, s.queue, s.leases, s.forced, s.expiry, s.released, s.wake,
                    s.leader,
                ];
                self.store(&mut state, l, &server, record, &names);
                state.evicted.extend(held);
                state.evicted.sort();
            }
        }
        // Expiry, as Redis's: a lock whose time came, a queue whose every lease ended.
        let now = state.now;
        for value in &mut state.keyspace {
            match value {
                Some(Value::Lock(_, expires)) if *expires <= now => *value = None,
                Some(Value::Queue(line)) if line.iter().all(|&(_, end)| end <= now) => {
                    *value = None
                }
                _ => {}
            }
        }
        for (c, client) in state.clients.iter_mut().enumerate() {
            match client {
                Client::Holding(_, until) if *until <= now => *until = 0,
                Client::Queued(_, since) if *since + self.ttl <= now => *since = 0,
                _ => {}
            }
            if !matches!(client, Client::Queued(..)) {
                state.told[c] = None;
            }
        }
        let believed = state.believed();
        state.both_held |= (0..2).all(|l| believed.iter().any(|(held, _)| *held == l));
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            // The steps' names, and every other name the library gives either lock (which
            // no step here uses, as `fenced`): none is both locks'.
            Property::always(
                "each lock's keys are its own",
                |model: &PairModel, state: &State| {
                    let [a, b] = &model.pairs[state.pair].all;
                    state.touched.iter().all(|&by| by != 0b11) && !a.iter().any(|n| b.contains(n))
                },
            ),
            Property::always(
                "each lock's names are distinct",
                |model: &PairModel, state: &State| model.pairs[state.pair].distinct,
            ),
            Property::always(
                "each companion names its own lock",
                |model: &PairModel, state: &State| model.pairs[state.pair].owners_agree,
            ),
            Property::always("mutual exclusion per name", |_, state: &State| {
                let believed = state.believed();
                (0..2).all(|l| believed.iter().filter(|(held, _)| *held == l).count() <= 1)
            }),
            Property::sometimes("both locks are held at once", |_, state: &State| {
                state.both_held
            }),
            Property::sometimes(
                "every name the steps use is used",
                |model: &PairModel, state: &State| {
                    let slots = &model.pairs[state.pair].slots;
                    (slots.iter().flat_map(Slots::each)).all(|n| state.touched[n] != 0)
                },
            ),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.max_time
    }
}

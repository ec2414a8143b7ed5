//! One lock name, its Redis keys (`scripts::Server`), a clock, and clients with what they
//! believe, as a stateright model: every interleaving of attempts, lost replies and
//! resends, releases, renewals (and their lost replies), lazily drawn fences, crashes and
//! the clock running past a client that does nothing (a paused holder); for the fair
//! mutex also waiting in line, trying again, and hearing of a direct hand-off.

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::scripts::{Server, Time, Token};

mod actions;
mod calls;
mod kind;
mod properties;

pub use kind::Kind;

/// What a client takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The mutex, or the write lock.
    Exclusive,
    /// A read hold.
    Reader,
    /// A semaphore permit.
    Permit,
    /// A hold of the reentrant mutex by the owner with this id: clients of one owner are
    /// its nested holds (taken and given back in any order, a superset of nesting).
    Owner(u8),
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
    /// Holds each client may be granted (the bound of the search); a downgrade's read
    /// hold is not counted.
    pub max_holds: u8,
    /// The owner of each client's read holds (the rwlock's: one owner's reads re-enter);
    /// a client not listed is an owner of its own.
    pub owners: Vec<u8>,
    /// How many of the semaphore's permits each client's permit takes
    /// (`Semaphore::lock_many`); a client not listed takes 1.
    pub weights: Vec<usize>,
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
    /// Waits in the fair mutex's line: its last attempt with `token`, at `since`, was
    /// answered busy and took (or kept) its place. It tries again with the same token
    /// (which also restarts its waiter lease), hears that a release handed it the lock,
    /// or gives up (leaves the line, then releases the token).
    Queued {
        /// The wait's token (one for every attempt of the wait).
        token: Token,
        /// When the last attempt that left it in line was sent (0 once a direct grant
        /// would no longer be taken as it is: `since + ttl <= now`).
        since: Time,
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
    /// What each client was told by a release that handed it the lock (queue.lua
    /// `tell_after_grant`: `granted <fence>`, published to it alone; the client may never
    /// hear it, as pub/sub may lose it): the fence, while it still waits with that token.
    pub told: Vec<Option<u64>>,
    /// Ghost: a grant went to someone other than the first live waiter in line.
    pub line_jumped: bool,
    /// Ghost: a release that answered "released" with a live waiter in line did not leave
    /// the lock held by the first of them.
    pub hand_off_missed: bool,
    /// Ghost: a waiter took a direct grant it was told of.
    pub handed: bool,
    /// Ghost: a release of a reentrant hold took other holds with it.
    pub took_others: bool,
    /// Each client's hold is the read hold its downgrade made (its role is then a
    /// reader's until it lets go).
    pub downgraded: Vec<bool>,
    /// Ghost: a downgrade was granted.
    pub downgrades: bool,
    /// Ghost: a granted downgrade left a writer in Redis, or no live read hold of its token
    /// with the write grant's fence.
    pub downgrade_broken: bool,
    /// Ghost: an owner re-entered its read hold while a writer waited in line.
    pub reentered: bool,
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
    /// Client `c`, in line, tries again with its token (restarting its place's lease).
    Retry(usize),
    /// Client `c`, in line, hears that a release handed it the lock.
    Hear(usize),
    /// Client `c` turns its write lock into a read hold (rwlock/downgrade.lua) and hears
    /// the answer.
    Downgrade(usize),
}

impl LockModel {
    fn role(&self, client: usize) -> Role {
        self.roles[client]
    }

    /// The role of client `c`'s hold now: a downgraded writer's is a reader's.
    fn role_now(&self, state: &State, client: usize) -> Role {
        if state.downgraded[client] {
            Role::Reader
        } else {
            self.role(client)
        }
    }

    /// The owner of a client's read holds.
    fn owner(&self, client: u8) -> u8 {
        self.owners
            .get(usize::from(client))
            .copied()
            .unwrap_or(client)
    }

    /// How many permits a token of client `client` takes (its `~w<k>`).
    pub fn weight(&self, client: u8) -> usize {
        self.weights.get(usize::from(client)).copied().unwrap_or(1)
    }

    /// Whether client `c`'s attempts wait in line when busy.
    fn joins(&self, client: usize) -> bool {
        self.kind.waiter_lease().is_some() && self.role(client) != Role::Reader
    }

    /// The role of a waiter in line.
    fn waiter_role(&self) -> Role {
        match self.kind {
            Kind::Semaphore { .. } => Role::Permit,
            _ => Role::Exclusive,
        }
    }

    /// Whether the lock (a permit, for the semaphore) is free now: nothing live holds it
    /// (for the semaphore: the first live waiter's weight, or one, fits).
    fn free(&self, server: &Server, now: Time) -> bool {
        let live = server.live_entries(now).count();
        match self.kind {
            Kind::Semaphore { permits, .. } => {
                let wanted = server
                    .live_waiters(now)
                    .next()
                    .map_or(1, |t| self.weight(t.client));
                server.weight_held(now, &|t| self.weight(t.client), &[]) + wanted <= permits
            }
            _ => server.holder(now).is_none() && live == 0 && server.reentrant_at(now).is_none(),
        }
    }

    /// Whether Redis holds `token` for `role` now.
    fn held_by(&self, server: &Server, token: Token, role: Role, now: Time) -> bool {
        match role {
            Role::Exclusive => server.holder(now) == Some(token),
            Role::Reader | Role::Permit => server.live_entries(now).any(|t| t == token),
            Role::Owner(owner) => server
                .reentrant_at(now)
                .is_some_and(|r| r.owner == owner && r.holds.contains(&token)),
        }
    }

    /// The most fences the search lets be drawn: each hold draws one at grant or on
    /// first read, and a lazy one may draw again once a tick after its record ended (a
    /// resend after a lost reply).
    fn fence_cap(&self) -> u64 {
        let holds = self.roles.len() as u64 * u64::from(self.max_holds);
        holds * (1 + u64::from(self.max_time) / 2) + 2
    }

    /// Whether writers may downgrade: the rwlock with its writer queue.
    fn downgrades(&self) -> bool {
        matches!(
            self.kind,
            Kind::RwLock {
                waiter_lease: Some(_)
            }
        )
    }

    fn lazy_fence(&self) -> bool {
        self.kind == (Kind::Mutex { eager: false })
    }
}

/// Records a new grant to `token` (by an attempt, or handed over by a release) in the
/// ghost history: its fence, when drawn with it, must exceed every earlier grant's.
fn granted(state: &mut State, token: Token, fence: Option<u64>) {
    // A grant to a token whose earlier grant was never heard (its reply lost, its lease
    // over before the resend): that one can no longer be heard.
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

/// A fence drawn by the grant at `position` in the pending list (its length: a grant made
/// after every pending one): each earlier pending grant must draw below it.
fn fence_drawn(state: &mut State, fence: u64, position: usize) {
    for (_, _, min_after) in &mut state.pending[..position] {
        *min_after = Some(min_after.map_or(fence, |m| m.min(fence)));
    }
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
            told: vec![None; self.roles.len()],
            line_jumped: false,
            hand_off_missed: false,
            handed: false,
            took_others: false,
            downgraded: vec![false; self.roles.len()],
            downgrades: false,
            downgrade_broken: false,
            reentered: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.enabled_actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.step(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.checked_properties()
    }

    fn within_boundary(&self, state: &State) -> bool {
        // A bug that draws fences without bound must not make the search endless; the
        // property "within the fence bound" reports a state that reaches the cap.
        state.now <= self.max_time && state.server.counter <= self.fence_cap()
    }
}

//! One lock name, its Redis keys (`scripts::Server`), a clock, and clients with what they
//! believe, as a stateright model: every interleaving of attempts, lost replies and
//! resends, releases, renewals (and their lost replies), lazily drawn fences, crashes and
//! the clock running past a client that does nothing (a paused holder); for the fair
//! mutex also waiting in line, trying again, and hearing of a direct hand-off.

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
    /// The read-write lock (its exclusion and purge); with `waiter_lease`, also its
    /// writer queue (writers wait in line, a release hands the lock to the first writer),
    /// a writer's downgrade to a read hold, and read re-entry by owner.
    RwLock {
        /// A waiting writer's lease on its place in line; `None`: writers make single
        /// attempts, which leave no trace in the queue.
        waiter_lease: Option<Time>,
    },
    /// The semaphore of `permits` (its count and purge); with `waiter_lease`, also its
    /// queue (a busy attempt waits in line, a release hands a free permit to the first).
    Semaphore {
        /// How many may hold at once.
        permits: usize,
        /// A waiter's lease on its place in line; `None`: single attempts only.
        waiter_lease: Option<Time>,
    },
    /// The fair mutex: a queue of waiters with leased places, a free lock granted to the
    /// first in line, and a release that hands the lock straight to the first waiter
    /// (fair/, queue/queue.lua).
    Fair {
        /// A waiter's lease on its place in line, in ticks (at least the lock's lease,
        /// as `direct_grant_start` in wait.rs requires for a direct grant).
        waiter_lease: Time,
    },
    /// The reentrant mutex: holds counted per owner, the lock freed when the owner's
    /// last hold is given back (reentrant/).
    Reentrant,
}

impl Kind {
    /// A waiter's lease on its place in line, for the kinds whose waiters queue.
    pub fn waiter_lease(self) -> Option<Time> {
        match self {
            Kind::Fair { waiter_lease } => Some(waiter_lease),
            Kind::RwLock { waiter_lease } | Kind::Semaphore { waiter_lease, .. } => waiter_lease,
            Kind::Mutex { .. } | Kind::Reentrant => None,
        }
    }

    /// Whether `mutant`'s bug is in a script this kind runs: a model of another kind checks the same
    /// with it as without it, and need not be searched for it.
    pub fn touched_by(self, mutant: Mutant) -> bool {
        let kind = self;
        match mutant {
            Mutant::ResendKeepsOldLease | Mutant::FenceReused => true,
            Mutant::ReleaseWithoutOwnerCheck => {
                !matches!(kind, Kind::Fair { .. } | Kind::Reentrant)
            }
            Mutant::FenceOutsideGrant => kind == Kind::Mutex { eager: false },
            Mutant::ReentrantFreedAtFirstRelease | Mutant::ResendCountedTwice => {
                kind == Kind::Reentrant
            }
            Mutant::SettleWithoutRaise
            | Mutant::SettleTakesSmallestFence
            | Mutant::SkipRaiseAtClock
            | Mutant::RestartNotDelayed => false,
            Mutant::PurgeForgetsLiveReader => {
                matches!(kind, Kind::RwLock { .. } | Kind::Semaphore { .. })
            }
            Mutant::PermitCountOffByOne => matches!(kind, Kind::Semaphore { .. }),
            Mutant::HandOffWithoutOwnerCheck | Mutant::GrantIgnoresQueue => {
                matches!(kind, Kind::Fair { .. })
            }
            // The string hand-off (queue.lua) is the fair mutex's and the writers'.
            Mutant::ReleaseSkipsHandOff | Mutant::HandOffReusesFence => matches!(
                kind,
                Kind::Fair { .. }
                    | Kind::RwLock {
                        waiter_lease: Some(_)
                    }
            ),
            Mutant::QueueKeepsLapsedWaiters | Mutant::QueueSkipsHead => {
                kind.waiter_lease().is_some()
            }
            Mutant::DowngradeWithoutOwnerCheck | Mutant::DowngradeNewFence => matches!(
                kind,
                Kind::RwLock {
                    waiter_lease: Some(_)
                }
            ),
            // guarded.rs's and election.rs's scripts.
            Mutant::ApplyWithoutHoldCheck
            | Mutant::ResendAppliesTwice
            | Mutant::ProclaimWithoutOwnerCheck
            | Mutant::LeaderWithoutHoldCheck => false,
            // The operator's and the look-alike names' models (force.rs, pair.rs).
            Mutant::ForceEvictsTwice | Mutant::SharedCompanion | Mutant::ForceKeepsLockKey => false,
            // The string lock's renewal (the mutex's, the fair mutex's, the writers').
            Mutant::RenewRecreatesKey => {
                matches!(
                    kind,
                    Kind::Mutex { .. } | Kind::Fair { .. } | Kind::RwLock { .. }
                )
            }
            // The weighted grant (semaphore/permits.lua): the semaphore's, in line.
            Mutant::PermitsCountedNotWeighed | Mutant::WeightedGrantPassesTheLine => matches!(
                kind,
                Kind::Semaphore {
                    waiter_lease: Some(_),
                    ..
                }
            ),
            // The multi-lock's scripts (multi.rs).
            Mutant::MultiGrantsPart
            | Mutant::MultiKeepsPart
            | Mutant::MultiReleasesOneName
            | Mutant::MultiResendRedraws => false,
        }
    }
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

    /// The acquire script of `role` for `token`.
    fn acquire(&self, server: &mut Server, token: Token, role: Role, now: Time) -> Grant {
        let m = &self.mutants;
        match (self.kind, role) {
            (Kind::Mutex { eager }, _) => server.mutex_acquire(token, now, self.ttl, eager, m),
            (Kind::RwLock { waiter_lease }, Role::Exclusive) => server.write_acquire(
                token,
                now,
                self.ttl,
                waiter_lease.unwrap_or(0),
                waiter_lease.is_some(),
                m,
            ),
            (Kind::RwLock { .. }, _) => {
                let owner_of = |t: Token| self.owner(t.client);
                server.read_acquire(owner_of(token), owner_of, token, now, self.ttl, m)
            }
            (
                Kind::Semaphore {
                    permits,
                    waiter_lease,
                },
                _,
            ) => server.weighted_permit_acquire(
                token,
                now,
                self.ttl,
                permits,
                waiter_lease.unwrap_or(0),
                waiter_lease.is_some(),
                &|t| self.weight(t.client),
                m,
            ),
            (Kind::Fair { waiter_lease }, _) => {
                server.fair_acquire(token, now, self.ttl, waiter_lease, true, m)
            }
            (Kind::Reentrant, role) => {
                server.reentrant_acquire(owner_of(role), token, now, self.ttl, m)
            }
        }
    }

    /// The release script of the client's role for `token`; true when it answered
    /// "released". A queued kind's hands the lock (a permit) to the first waiter in line:
    /// recorded as a grant, and told to that waiter.
    fn release(&self, state: &mut State, client: usize, token: Token) -> bool {
        let now = state.now;
        let m = &self.mutants;
        let first = state.server.live_waiters(now).next();
        let role = self.role_now(state, client);
        let server = &mut state.server;
        let (released, handed) = match (self.kind, role) {
            (Kind::Fair { .. }, _) => server.fair_release(token, now, self.ttl, m),
            (_, Role::Owner(owner)) => {
                let before = live_holds(server, now);
                let released = server.reentrant_release(owner, token, now, m);
                if released {
                    let mut left = before;
                    left.remove(&token);
                    state.took_others |= live_holds(&state.server, now) != left;
                }
                return released;
            }
            (Kind::RwLock { .. }, Role::Exclusive) => server.write_release(token, now, self.ttl, m),
            (Kind::RwLock { .. }, _) => server.read_release(token, now, self.ttl, m),
            (Kind::Semaphore { permits, .. }, _) => server.weighted_permit_release(
                token,
                now,
                self.ttl,
                permits,
                &|t| self.weight(t.client),
                m,
            ),
            (_, _) => (server.mutex_release(token, now, m), None),
        };
        if let (true, Some(first)) = (released, first) {
            state.hand_off_missed |= match self.kind {
                Kind::Fair { .. } => state.server.holder(now) != Some(first),
                // Unless the first in line holds now, the lock (a permit) is not free
                // for it.
                _ => {
                    let role = self.waiter_role();
                    !self.held_by(&state.server, first, role, now) && {
                        let mut server = state.server.clone();
                        matches!(
                            self.acquire(&mut server, first, role, now),
                            Grant::Granted(_)
                        )
                    }
                }
            };
        }
        if let Some((waiter, fence)) = handed {
            // A direct grant, like an attempt's, goes to the first in line.
            state.line_jumped |= first != Some(waiter);
            granted(state, waiter, Some(fence));
            let c = usize::from(waiter.client);
            // (A waiter whose reply was lost does not take a direct grant: it resends,
            // and finds the lock its own.)
            if matches!(state.clients[c], Client::Queued { token, .. } if token == waiter) {
                state.told[c] = Some(fence);
            }
        }
        released
    }

    /// A wait that ends without a grant gives back what may be its own (wait.rs `Claim`):
    /// its place in line first (queue/cancel.lua), then a grant it may not have heard of.
    fn give_back(&self, state: &mut State, client: usize, token: Token) {
        if self.joins(client) {
            state.server.queue_cancel(token);
        }
        self.release(state, client, token);
    }

    fn renew(&self, server: &mut Server, token: Token, role: Role, now: Time) -> bool {
        // (A downgraded writer's read hold renews as a read hold: `role` is its role now.)
        match role {
            Role::Exclusive => server.renew_string_mutated(token, now, self.ttl, &self.mutants),
            Role::Reader | Role::Permit => server.renew_entry(token, now, self.ttl),
            Role::Owner(_) => server.renew_reentrant(token, now, self.ttl),
        }
    }

    /// Runs an acquire at `now`; records a new grant in the ghost history.
    fn run_acquire(&self, state: &mut State, client: usize, token: Token) -> Grant {
        let role = self.role(client);
        let now = state.now;
        let server = &state.server;
        // A nested hold is not a grant of the lock: the owner holds it already; nor is a
        // read hold of an owner that reads (a re-entry, with the owner's fence).
        let owner = self.owner(token.client);
        let reading = role == Role::Reader
            && server.holder(now).is_none()
            && server
                .live_entries(now)
                .any(|t| self.owner(t.client) == owner);
        let was_held = self.held_by(server, token, role, now)
            || reading
            || (server.reentrant_at(now)).is_some_and(|r| Role::Owner(r.owner) == role);
        let line: Vec<Token> = server.live_waiters(now).collect();
        // How many waiters are ahead of it (all of them, for a newcomer), and the weight
        // they take (one each but in a weighted semaphore).
        let ahead = line.iter().position(|&t| t == token).unwrap_or(line.len());
        let ahead_weight: usize = line[..ahead].iter().map(|t| self.weight(t.client)).sum();
        let held = server.weight_held(now, &|t| self.weight(t.client), &[]);
        let grant = self.acquire(&mut state.server, token, role, now);
        if let Grant::Granted(fence) = grant {
            if !was_held {
                // Granted by an attempt: to no more waiters than there are permits free,
                // the first in line first; a reader only when no writer waits.
                state.line_jumped |= match (self.kind, role) {
                    (Kind::Fair { .. }, _) => ahead > 0,
                    (Kind::Semaphore { permits, .. }, _) => {
                        ahead_weight + held + self.weight(token.client) > permits
                    }
                    (Kind::RwLock { .. }, Role::Reader) => !line.is_empty(),
                    (Kind::RwLock { .. }, _) => ahead > 0,
                    _ => false,
                };
                granted(state, token, fence);
            } else if reading && !line.is_empty() {
                state.reentered = true;
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

/// The owner id of a reentrant hold.
fn owner_of(role: Role) -> u8 {
    match role {
        Role::Owner(owner) => owner,
        _ => 0,
    }
}

/// The reentrant mutex's holds in Redis now.
fn live_holds(server: &Server, now: Time) -> std::collections::BTreeSet<Token> {
    server
        .reentrant_at(now)
        .map(|r| r.holds.clone())
        .unwrap_or_default()
}

/// A token no client uses: a newcomer's attempt.
const STRANGER: Token = Token {
    client: u8::MAX,
    attempt: 0,
};

/// The holds clients believe valid now: (client, role).
fn believed(model: &LockModel, state: &State) -> Vec<(usize, Role)> {
    state
        .clients
        .iter()
        .enumerate()
        .filter_map(|(c, client)| match client {
            Client::Holding { until, .. } if *until > state.now => {
                Some((c, model.role_now(state, c)))
            }
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
                Client::Queued { since, .. } => {
                    actions.push(Action::Retry(c));
                    actions.push(Action::GiveUp(c));
                    // A direct grant is taken as it is while its lease, counted from the
                    // attempt that queued, has not passed. (wait.rs takes it only within a
                    // third of the ttl, and attempts otherwise: the model lets it be taken
                    // later too, a superset of what the client does.)
                    if state.told[c].is_some() && since + self.ttl > state.now {
                        actions.push(Action::Hear(c));
                    }
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
                    // A writer of the rwlock with its queue may downgrade (the guard's
                    // `downgrade`, valid or not: the script checks). Its read hold's token
                    // is not counted against `max_holds`.
                    if self.downgrades() && self.role_now(state, c) == Role::Exclusive {
                        actions.push(Action::Downgrade(c));
                    }
                }
                _ => {}
            }
            // A client that holds nothing and crashes is one that never acts again: the
            // search has that already.
            if matches!(
                client,
                Client::InFlight { .. } | Client::Holding { .. } | Client::Queued { .. }
            ) {
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
                } else if self.joins(c) {
                    // Busy, and in line (the attempt took a place).
                    state.attempts[c] += 1;
                    state.clients[c] = Client::Queued { token, since: now };
                } else {
                    return None; // busy: nothing changed
                }
            }
            Action::Retry(c) => {
                let Client::Queued { token, .. } = state.clients[c] else {
                    return None;
                };
                // What it was told before is used up by the attempt (wait.rs: the
                // notifier's `before_attempt`).
                state.told[c] = None;
                state.clients[c] = match self.run_acquire(&mut state, c, token) {
                    Grant::Granted(fence) => Client::Holding {
                        token,
                        until: now + self.ttl,
                        fence,
                    },
                    Grant::Busy => Client::Queued { token, since: now },
                };
            }
            Action::Hear(c) => {
                let (Client::Queued { token, since }, Some(fence)) =
                    (state.clients[c], state.told[c])
                else {
                    return None;
                };
                // wait.rs `direct_grant_start`: the lease counts from the attempt that
                // queued it (the hand-off's lease ends no earlier: the waiter lease that
                // attempt restarted is at least the ttl).
                state.handed = true;
                state.clients[c] = Client::Holding {
                    token,
                    until: since + self.ttl,
                    fence: Some(fence),
                };
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
                    Grant::Busy if self.joins(c) => Client::Queued { token, since: now },
                    Grant::Busy => Client::Idle,
                };
            }
            Action::GiveUp(c) => {
                let (Client::InFlight { token } | Client::Queued { token, .. }) = state.clients[c]
                else {
                    return None;
                };
                self.give_back(&mut state, c, token);
                state.clients[c] = Client::Idle;
            }
            Action::Release(c) => {
                let Client::Holding { token, .. } = state.clients[c] else {
                    return None;
                };
                let role = self.role_now(&state, c);
                let released = self.release(&mut state, c, token);
                state.release_kept |= released && self.held_by(&state.server, token, role, now);
                state.clients[c] = Client::Idle;
            }
            Action::Renew(c) | Action::RenewLost(c) => {
                let Client::Holding { token, fence, .. } = state.clients[c] else {
                    return None;
                };
                let role = self.role_now(&state, c);
                let renewed = self.renew(&mut state.server, token, role, now);
                if let Action::Renew(_) = action {
                    state.clients[c] = if renewed {
                        Client::Holding {
                            token,
                            until: now + self.ttl,
                            fence,
                        }
                    } else {
                        // The lost signal: the guard is dropped, which releases.
                        self.release(&mut state, c, token);
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
                            self.release(&mut state, c, token);
                            Client::Idle
                        }
                    };
                }
            }
            Action::Crash(c) => {
                state.clients[c] = Client::Crashed;
            }
            Action::Downgrade(c) => {
                let Client::Holding {
                    token,
                    fence: Some(fence),
                    ..
                } = state.clients[c]
                else {
                    return None;
                };
                // The read hold's own token (the claim's).
                let hold = Token {
                    client: c as u8,
                    attempt: state.attempts[c],
                };
                state.attempts[c] += 1;
                let m = &self.mutants;
                // What Redis held before: only our write lock may turn into the read hold
                // (or a read hold of ours made already, a resend), and it keeps the write
                // grant's fence, drawing none.
                let was_ours = state.server.holder(now) == Some(token)
                    || (state.server.entries.get(&hold)).is_some_and(|&(end, _)| end > now);
                let counter = state.server.counter;
                let answer = state.server.downgrade(token, hold, now, self.ttl, fence, m);
                state.clients[c] = match answer {
                    Some(read_fence) => {
                        state.downgrades = true;
                        state.downgraded[c] = true;
                        // The write lock is gone, and a live read hold of the new token
                        // keeps the write grant's fence (not a new grant).
                        let kept = state.server.entries.get(&hold).copied();
                        state.downgrade_broken |= read_fence != fence
                            || !was_ours
                            || state.server.counter != counter
                            || state.server.holder(now).is_some()
                            || kept != Some((now + self.ttl, fence));
                        Client::Holding {
                            token: hold,
                            until: now + self.ttl,
                            fence: Some(read_fence),
                        }
                    }
                    None => {
                        // Lost: the claim gives back its read hold (none was made), and the
                        // dropped write guard releases the write lock if still ours.
                        self.release(&mut state, c, token);
                        Client::Idle
                    }
                };
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
        // A validity that ended no longer matters when: one state for all of them; nor
        // does when a waiter queued, once a direct grant would not be taken as it is.
        for (c, client) in state.clients.iter_mut().enumerate() {
            match client {
                Client::Holding { until, .. } if *until <= state.now => *until = 0,
                Client::Queued { since, .. } if *since + self.ttl <= state.now => *since = 0,
                _ => {}
            }
            // A message for a wait that ended is heard by nobody.
            if !matches!(client, Client::Queued { .. }) {
                state.told[c] = None;
            }
            // A downgraded hold is a read hold until it is let go.
            if !matches!(client, Client::Holding { .. }) {
                state.downgraded[c] = false;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("mutual exclusion", |model: &LockModel, state: &State| {
                let holds = believed(model, state);
                let count = |role| holds.iter().filter(|(_, r)| *r == role).count();
                let (exclusive, readers) = (count(Role::Exclusive), count(Role::Reader));
                let permits = match model.kind {
                    Kind::Semaphore { permits, .. } => permits,
                    _ => 0,
                };
                // The reentrant mutex: one owner at a time (its holds are nested).
                let mut owners = holds.iter().filter_map(|(_, r)| match r {
                    Role::Owner(owner) => Some(*owner),
                    _ => None,
                });
                let one_owner = owners
                    .next()
                    .is_none_or(|first| owners.all(|owner| owner == first));
                let permits_held: usize = holds
                    .iter()
                    .filter(|(_, r)| *r == Role::Permit)
                    .map(|&(c, _)| model.weight(c as u8))
                    .sum();
                exclusive <= 1
                    && (exclusive == 0 || readers == 0)
                    && permits_held <= permits
                    && one_owner
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
        ];
        if !self.weights.is_empty() {
            // Redis's side of the weighted count: what the live permits weigh.
            properties.push(Property::always(
                "held weights never exceed N",
                |model: &LockModel, state: &State| {
                    let Kind::Semaphore { permits, .. } = model.kind else {
                        return true;
                    };
                    let weight_of = |t: Token| model.weight(t.client);
                    state.server.weight_held(state.now, &weight_of, &[]) <= permits
                },
            ));
            properties.push(Property::sometimes(
                "a small request waits behind a large one while permits are free",
                |model: &LockModel, state: &State| {
                    let Kind::Semaphore { permits, .. } = model.kind else {
                        return false;
                    };
                    let weight_of = |t: Token| model.weight(t.client);
                    let free = permits.saturating_sub(state.server.weight_held(
                        state.now,
                        &weight_of,
                        &[],
                    ));
                    let mut line = state.server.live_waiters(state.now).map(weight_of);
                    line.next().is_some_and(|first| first > free)
                        && line.any(|behind| behind <= free)
                },
            ));
        }
        if self.kind.waiter_lease().is_some() {
            properties.extend([
                Property::always(
                    "a free lock is granted to the first in line",
                    |model: &LockModel, state: &State| {
                        // Its next attempt, or anyone's when nobody waits: a lock (a permit)
                        // that expired or was released blocks nobody, and a waiter that
                        // crashed or stopped refreshing its place blocks the line only
                        // until its waiter lease ends.
                        if !model.free(&state.server, state.now) {
                            return true;
                        }
                        let attempt = |token, role| {
                            let mut server = state.server.clone();
                            matches!(
                                model.acquire(&mut server, token, role, state.now),
                                Grant::Granted(_)
                            )
                        };
                        match state.server.live_waiters(state.now).next() {
                            Some(first) => attempt(first, model.waiter_role()),
                            None => model.roles.iter().all(|&role| attempt(STRANGER, role)),
                        }
                    },
                ),
                Property::always(
                    "a release hands the lock to the first in line",
                    |_, state: &State| !state.hand_off_missed,
                ),
                Property::always("grants follow the line", |_, state: &State| {
                    !state.line_jumped
                }),
                Property::sometimes("a waiter is handed the lock", |_, state: &State| {
                    state.handed
                }),
            ]);
            if self.downgrades() {
                properties.extend([
                    Property::always(
                        "a downgrade keeps its hold and fence",
                        |_, state: &State| !state.downgrade_broken,
                    ),
                    Property::sometimes("a writer downgrades", |_, state: &State| state.downgrades),
                    Property::sometimes(
                        "an owner re-enters its read hold while a writer waits",
                        |_, state: &State| state.reentered,
                    ),
                ]);
            }
        } else {
            properties.push(Property::always(
                "a free lock is granted to the next attempt",
                |model: &LockModel, state: &State| {
                    let free = state.server.holder(state.now).is_none()
                        && state.server.live_entries(state.now).next().is_none()
                        && state.server.reentrant_at(state.now).is_none();
                    if !free {
                        return true;
                    }
                    model.roles.iter().all(|&role| {
                        let mut server = state.server.clone();
                        matches!(
                            model.acquire(&mut server, STRANGER, role, state.now),
                            Grant::Granted(_)
                        )
                    })
                },
            ));
        }
        if self.kind == Kind::Reentrant {
            properties.extend([
                Property::always("a release gives back its hold alone", |_, state: &State| {
                    !state.took_others
                }),
                Property::always(
                    "the last hold given back frees the lock",
                    |_, state: &State| {
                        // The count reached zero when no hold is left: the key is gone.
                        state
                            .server
                            .reentrant_at(state.now)
                            .is_none_or(|r| !r.holds.is_empty())
                    },
                ),
                Property::sometimes(
                    "an owner holds twice at once",
                    |model: &LockModel, state: &State| {
                        believed(model, state)
                            .iter()
                            .filter(|(_, r)| matches!(r, Role::Owner(0)))
                            .count()
                            >= 2
                    },
                ),
            ]);
        }
        properties
    }

    fn within_boundary(&self, state: &State) -> bool {
        // A bug that draws fences without bound must not make the search endless; the
        // property "within the fence bound" reports a state that reaches the cap.
        state.now <= self.max_time && state.server.counter <= self.fence_cap()
    }
}

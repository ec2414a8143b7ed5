//! Redlock's fence settlement over three masters (redlock/mutex.rs): each granting master
//! draws a fence with its grant (mutex/acquire.lua with the fence at grant, fencing.lua's
//! draw), the round takes the largest, and when fewer than a majority drew exactly that
//! one, raises the counters behind it (redlock/raise.lua, only upward, only where the hold
//! is still the round's) so that a majority holds it before the grant counts: also when
//! it is a master's clock (the floor), since a later majority without that master reads
//! clocks that may run behind it. A master may restart empty (no persistence): its lock
//! and its counter are gone, and it stays away for a lease (the delayed restart that
//! Redlock needs).
//!
//! Clients start a round with a fresh token, ask each master in any order (interleaved
//! with everything else), decide once every master answered, raise where needed, and
//! release on every master. A master's clock may run ahead of the others' by an offset
//! of less than a lease (what NTP leaves between machines, however the clock got there):
//! only what its clock floor reads changes, its holds last as long as anywhere. Or its
//! clock may jump forward by more than a lease (the known Redlock weakness,
//! `redlock-clock-jump` in docs/safety.md): every hold it keeps ends at once, and its
//! clock reads ahead of every other master's from then on. Not modelled: lost replies and
//! resends to a master, renewal, clock drift between masters (but for the offset and the
//! jump), and a master that stays down.

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::scripts::{Time, Token};

mod master;
pub use master::Master;

/// Masters.
const MASTERS: usize = 3;
/// A majority of them.
const QUORUM: u8 = 2;
/// The masters' clock, in fence units per tick: more than the fences all masters can draw
/// in a tick within the bounds. The masters' clocks agree but for an offset or a jump, and
/// every draw happens at an instant of its own (the clock reads one more for each draw
/// within a tick).
const CLOCK_PER_TICK: u64 = 32;

/// What a Redlock client is doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Holds nothing.
    Idle,
    /// A round with `token`, started at `started`: the masters asked so far (a bit each)
    /// and the grants, in the order they answered (master, fence, drawn from the clock).
    Asking {
        /// The round's token.
        token: Token,
        /// When the round started (its validity counts from here).
        started: Time,
        /// The masters asked.
        asked: u8,
        /// The grants.
        granted: Vec<(u8, u64, bool)>,
        /// Ghost, in the models of a jumped clock (0 elsewhere): the largest fence granted
        /// before the round started.
        after: u64,
    },
    /// A majority granted, with `fence` the largest: the masters in `behind` are still to
    /// be raised to it; `settled` masters hold it already.
    Raising {
        /// The round's token.
        token: Token,
        /// When the round started.
        started: Time,
        /// The fence the round settles on.
        fence: u64,
        /// The granting masters still to raise (a bit each).
        behind: u8,
        /// Masters known to hold `fence`.
        settled: u8,
        /// Ghost: as in `Asking`.
        after: u64,
    },
    /// Granted: believes it holds until `until`, with `fence`.
    Holding {
        /// The round's token.
        token: Token,
        /// The end of its validity.
        until: Time,
        /// Its fence.
        fence: u64,
    },
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock (the masters' and the clients' agree).
    pub now: Time,
    /// The masters.
    pub masters: Vec<Master>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Rounds each client started.
    pub rounds: Vec<u8>,
    /// Masters restarted so far.
    pub restarts: u8,
    /// Masters' clock jumps so far.
    pub jumps: u8,
    /// Masters' clock offsets so far.
    pub offsets: u8,
    /// Fences drawn in this tick, on any master (the clock's reading within the tick).
    pub draws: u8,
    /// Ghost: the largest fence any grant was given.
    pub max_fence: u64,
    /// Ghost: a grant's fence was not above every earlier grant's.
    pub fence_order_broken: bool,
    /// Ghost, in the models of a jumped clock: a grant's fence was not above every fence
    /// granted before its round started.
    pub round_order_broken: bool,
    /// Ghost: a grant raised a counter to settle its fence.
    pub raised: bool,
    /// Ghost, in the models of an offset clock: a round's fence was the clock of a master
    /// ahead of the others, and the round went on to raise the others to it.
    pub raised_to_clock_ahead: bool,
    /// Ghost: a grant came after a master restarted.
    pub granted_after_restart: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Client `c` starts a round with a fresh token.
    Start(usize),
    /// Client `c`'s request reaches master `m`, and its answer comes back.
    Ask(usize, usize),
    /// Client `c` has every answer and decides: settle, or give back.
    Decide(usize),
    /// Client `c`'s raise reaches master `m`.
    Raise(usize, usize),
    /// Client `c` has every raise's answer: granted, or give back.
    Settle(usize),
    /// Client `c` releases on every master.
    Release(usize),
    /// Master `m` restarts empty.
    Restart(usize),
    /// Master `m`'s clock runs ahead of the others' by less than a lease.
    Offset(usize),
    /// Master `m`'s clock jumps forward by more than a lease.
    Jump(usize),
}

/// A Redlock model to check.
#[derive(Clone, Debug)]
pub struct RedlockModel {
    /// Shown in reports.
    pub name: &'static str,
    /// Clients.
    pub clients: usize,
    /// The lease, in ticks.
    pub ttl: Time,
    /// The clock stops here.
    pub max_time: Time,
    /// Rounds each client may start.
    pub max_rounds: u8,
    /// Masters that may restart empty.
    pub max_restarts: u8,
    /// Clock jumps forward, by more than a lease, of master 0 (the masters are alike:
    /// which one jumps changes only names).
    pub max_jumps: u8,
    /// Offsets of master 0's clock ahead of the others' (by `offset` ticks each), with
    /// the floor (without it no clock is read).
    pub max_offsets: u8,
    /// How far an offset moves the clock, in ticks: less than a lease.
    pub offset: Time,
    /// Fences have the clock floor (fencing.lua); without it only the counters count.
    pub clock_floor: bool,
    /// Bugs put in on purpose.
    pub mutants: Vec<Mutant>,
}

impl RedlockModel {
    /// Whether `mutant`'s bug acts in this Redlock model (`redlock/`, which no model of
    /// one server runs): a model it does not act in checks the same with it as without it
    /// (`tests/check.rs` shows it), and need not be searched for it. The settlement acts in
    /// every Redlock model, the raise skipped at a clock fence only where there is a
    /// floor, a restart's delay only where a master restarts.
    pub fn touched_by(&self, mutant: Mutant) -> bool {
        match mutant {
            Mutant::SettleWithoutRaise | Mutant::SettleTakesSmallestFence => true,
            Mutant::SkipRaiseAtClock => self.clock_floor,
            Mutant::RestartNotDelayed => self.max_restarts > 0,
            _ => false,
        }
    }
}

impl RedlockModel {
    /// Master `m`'s clock, as the clock floor reads it (None: no floor).
    fn clock(&self, state: &State, m: usize) -> Option<u64> {
        self.clock_floor.then(|| {
            let ticks = u64::from(state.now) + u64::from(state.masters[m].ahead) + 1;
            ticks * CLOCK_PER_TICK + u64::from(state.draws)
        })
    }

    /// How far a jump moves a master's clock, in ticks: more than a lease, and beyond
    /// where any other master's clock gets in the run (the clock stops at `max_time`), so
    /// that the jumped master's floor draws are above every other's for the rest of it.
    pub fn jump_ticks(&self) -> Time {
        self.max_time.max(self.ttl) + 1
    }

    /// Gives back whatever the round may hold, on every master (the `Round`'s drop).
    fn give_back(&self, state: &mut State, token: Token) {
        for master in &mut state.masters {
            master.release(token, state.now);
        }
    }

    /// The round is granted with `fence` if it is still valid.
    /// `after`: the largest fence granted before the round started (ghost).
    fn grant(
        &self,
        state: &mut State,
        c: usize,
        (token, started, after): (Token, Time, u64),
        fence: u64,
    ) {
        if state.now >= started + self.ttl {
            self.give_back(state, token);
            state.clients[c] = Client::Idle;
            return;
        }
        state.fence_order_broken |= fence <= state.max_fence;
        state.round_order_broken |= fence <= after;
        state.max_fence = state.max_fence.max(fence);
        state.granted_after_restart |= state.restarts > 0;
        state.clients[c] = Client::Holding {
            token,
            until: started + self.ttl,
            fence,
        };
    }
}

/// The clients that believe they hold (their validity not ended).
fn believing(state: &State) -> usize {
    let now = state.now;
    state
        .clients
        .iter()
        .filter(|c| matches!(c, Client::Holding { until, .. } if *until > now))
        .count()
}

impl Model for RedlockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            masters: vec![Master::default(); MASTERS],
            clients: vec![Client::Idle; self.clients],
            rounds: vec![0; self.clients],
            restarts: 0,
            jumps: 0,
            offsets: 0,
            draws: 0,
            max_fence: 0,
            fence_order_broken: false,
            round_order_broken: false,
            raised: false,
            raised_to_clock_ahead: false,
            granted_after_restart: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle if state.rounds[c] < self.max_rounds => actions.push(Action::Start(c)),
                Client::Asking { asked, .. } => {
                    for m in 0..MASTERS {
                        if asked & (1 << m) == 0 {
                            actions.push(Action::Ask(c, m));
                        }
                    }
                    if usize::from(*asked) == (1 << MASTERS) - 1 {
                        actions.push(Action::Decide(c));
                    }
                }
                Client::Raising { behind, .. } => {
                    for m in 0..MASTERS {
                        if behind & (1 << m) != 0 {
                            actions.push(Action::Raise(c, m));
                        }
                    }
                    if *behind == 0 {
                        actions.push(Action::Settle(c));
                    }
                }
                Client::Holding { .. } => actions.push(Action::Release(c)),
                Client::Idle => {}
            }
        }
        if state.restarts < self.max_restarts {
            for m in 0..MASTERS {
                actions.push(Action::Restart(m));
            }
        }
        // Without the floor no clock is read: a jump that ends no hold changes nothing but
        // the count of jumps, and is left out (the runs with a later jump are still here).
        let ends_a_hold = state.masters[0].lock.is_some();
        if state.jumps < self.max_jumps && (self.clock_floor || ends_a_hold) {
            actions.push(Action::Jump(0));
        }
        if state.offsets < self.max_offsets && self.clock_floor {
            actions.push(Action::Offset(0));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => {
                state.now += 1;
                state.draws = 0;
            }
            Action::Start(c) => {
                let token = Token {
                    client: c as u8,
                    attempt: state.rounds[c],
                };
                state.rounds[c] += 1;
                // Only where a clock jumps: elsewhere it would only split states.
                let after = if self.max_jumps > 0 {
                    state.max_fence
                } else {
                    0
                };
                state.clients[c] = Client::Asking {
                    token,
                    started: now,
                    asked: 0,
                    granted: Vec::new(),
                    after,
                };
            }
            Action::Ask(c, m) => {
                let clock = self.clock(&state, m);
                let Client::Asking {
                    token,
                    asked,
                    granted,
                    ..
                } = &mut state.clients[c]
                else {
                    return None;
                };
                *asked |= 1 << m;
                if let Some((fence, from_clock)) =
                    state.masters[m].acquire(*token, now, self.ttl, clock)
                {
                    granted.push((m as u8, fence, from_clock));
                    if self.clock_floor {
                        state.draws += 1;
                    }
                }
            }
            Action::Decide(c) => {
                let Client::Asking {
                    token,
                    started,
                    granted,
                    after,
                    ..
                } = state.clients[c].clone()
                else {
                    return None;
                };
                if granted.len() < usize::from(QUORUM) {
                    self.give_back(&mut state, token);
                    state.clients[c] = Client::Idle;
                    return Some(state);
                }
                // mutex.rs `settle_fence`: the largest fence (the mutant: the smallest, held
                // or exceeded by every granting master).
                let smallest = self.mutants.contains(&Mutant::SettleTakesSmallestFence);
                let fence = if smallest {
                    granted.iter().map(|g| g.1).min()
                } else {
                    granted.iter().map(|g| g.1).max()
                }
                .expect("a quorum");
                let bits = |keep: &dyn Fn(u64) -> bool| {
                    granted
                        .iter()
                        .filter(|g| keep(g.1))
                        .fold(0u8, |bits, g| bits | 1 << g.0)
                };
                let settled = bits(&|f| f == fence || (smallest && f > fence));
                // The mutant: the shortcut mutex.rs had before issue 32, no raise when the
                // fence is a master's clock.
                let skip_at_clock = self.mutants.contains(&Mutant::SkipRaiseAtClock)
                    && granted.iter().any(|g| g.2 && g.1 == fence);
                if settled.count_ones() >= u32::from(QUORUM)
                    || skip_at_clock
                    || self.mutants.contains(&Mutant::SettleWithoutRaise)
                {
                    self.grant(&mut state, c, (token, started, after), fence);
                } else {
                    let ahead = |m: u8| state.masters[usize::from(m)].ahead > 0;
                    state.raised_to_clock_ahead |= self.max_offsets > 0
                        && granted.iter().any(|g| g.2 && g.1 == fence && ahead(g.0));
                    state.clients[c] = Client::Raising {
                        token,
                        started,
                        fence,
                        behind: bits(&|f| f < fence),
                        settled,
                        after,
                    };
                }
            }
            Action::Raise(c, m) => {
                let Client::Raising {
                    token,
                    fence,
                    behind,
                    settled,
                    ..
                } = &mut state.clients[c]
                else {
                    return None;
                };
                *behind &= !(1 << m);
                if state.masters[m].raise(*token, *fence, now) {
                    *settled |= 1 << m;
                    state.raised = true;
                }
            }
            Action::Settle(c) => {
                let Client::Raising {
                    token,
                    started,
                    fence,
                    settled,
                    after,
                    ..
                } = state.clients[c]
                else {
                    return None;
                };
                if settled.count_ones() >= u32::from(QUORUM) {
                    self.grant(&mut state, c, (token, started, after), fence);
                } else {
                    self.give_back(&mut state, token);
                    state.clients[c] = Client::Idle;
                }
            }
            Action::Release(c) => {
                let Client::Holding { token, .. } = state.clients[c] else {
                    return None;
                };
                self.give_back(&mut state, token);
                state.clients[c] = Client::Idle;
            }
            Action::Restart(m) => {
                state.restarts += 1;
                // Empty, and away for a lease (the mutant: back at once).
                let away = if self.mutants.contains(&Mutant::RestartNotDelayed) {
                    0
                } else {
                    self.ttl
                };
                // Its clock is the machine's: a restart keeps it where it is.
                let ahead = state.masters[m].ahead;
                state.masters[m] = Master::restarted(now + away);
                state.masters[m].ahead = ahead;
            }
            Action::Jump(m) => {
                state.jumps += 1;
                state.masters[m].jumped(self.jump_ticks());
            }
            Action::Offset(m) => {
                state.offsets += 1;
                state.masters[m].offset(self.offset);
            }
        }
        // Canonical forms: a lapsed lease, a return that came, a validity that ended.
        let now = state.now;
        for master in &mut state.masters {
            if master.lock.is_some_and(|(_, e)| e <= now) {
                master.lock = None;
            }
            if master.away_until <= now {
                master.away_until = 0;
            }
        }
        for client in &mut state.clients {
            if let Client::Holding { until, .. } = client {
                if *until <= now {
                    *until = 0;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let jumps = self.max_jumps > 0;
        let mut properties = Vec::new();
        // A clock that jumps ends a hold early on its master: mutual exclusion is broken
        // by design there (the lease *is* the masters' clocks), so it is checked only
        // where no clock jumps, and the jump's models show the double grant instead.
        if !jumps {
            properties.push(Property::always("mutual exclusion", |_, state: &State| {
                believing(state) <= 1
            }));
        }
        if !jumps {
            properties.push(Property::always(
                "fences follow grants",
                |_, state: &State| !state.fence_order_broken,
            ));
        }
        // The jump's two rounds of a double grant may decide in either order (a round
        // that drew before the jump may decide after the contender's grant, with the
        // smaller fence): "fences follow grants", which orders grants as they are decided,
        // is broken there by the double grant itself. What the raise keeps is the order of
        // rounds that do not overlap: a round started after a grant meets, on a master that
        // kept it, the counter that grant left on a majority; with the floor too, since the
        // jumped clock's fence is raised like any other.
        if jumps {
            properties.push(Property::always(
                "fences follow grants of earlier rounds",
                |_, state: &State| !state.round_order_broken,
            ));
        }
        // Each example only where it can happen, so that "reached" is never claimed for a
        // model that cannot reach it. With the floor, masters draw their clocks, which
        // differ by the instant of each draw: the raise is the common case there.
        properties.push(Property::sometimes(
            "a grant raises a counter to settle",
            |_, state: &State| state.raised,
        ));
        if self.max_restarts > 0 {
            properties.push(Property::sometimes(
                "a grant follows a master's restart",
                |_, state: &State| state.granted_after_restart,
            ));
        }
        if self.max_offsets > 0 && self.clock_floor {
            properties.push(Property::sometimes(
                "a round raises the others to the clock of a master ahead",
                |_, state: &State| state.raised_to_clock_ahead,
            ));
        }
        if jumps {
            properties.push(Property::sometimes(
                "two clients believe they hold at once (the jump's double grant)",
                |_, state: &State| believing(state) >= 2,
            ));
        }
        properties
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.max_time
    }
}

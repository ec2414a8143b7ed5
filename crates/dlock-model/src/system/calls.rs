//! Which script each client's step runs, by kind and role (acquire, release, renewal, a
//! wait's give-back), and the ghost record a grant leaves.

use crate::scripts::{Grant, Server, Time, Token};
use crate::system::{granted, Client, Kind, LockModel, Role, State};

impl LockModel {
    /// The acquire script of `role` for `token`.
    pub(super) fn acquire(
        &self,
        server: &mut Server,
        token: Token,
        role: Role,
        now: Time,
    ) -> Grant {
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
    pub(super) fn release(&self, state: &mut State, client: usize, token: Token) -> bool {
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
    pub(super) fn give_back(&self, state: &mut State, client: usize, token: Token) {
        if self.joins(client) {
            state.server.queue_cancel(token);
        }
        self.release(state, client, token);
    }

    pub(super) fn renew(&self, server: &mut Server, token: Token, role: Role, now: Time) -> bool {
        // (A downgraded writer's read hold renews as a read hold: `role` is its role now.)
        match role {
            Role::Exclusive => server.renew_string_mutated(token, now, self.ttl, &self.mutants),
            Role::Reader | Role::Permit => server.renew_entry(token, now, self.ttl),
            Role::Owner(_) => server.renew_reentrant(token, now, self.ttl),
        }
    }

    /// Runs an acquire at `now`; records a new grant in the ghost history.
    pub(super) fn run_acquire(&self, state: &mut State, client: usize, token: Token) -> Grant {
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

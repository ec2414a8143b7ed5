//! The properties a one-name model is checked for: every kind's (exclusion, fences, beliefs
//! backed by Redis, releases), and the queued, downgrading, weighted and reentrant kinds' own.

use stateright::Property;

use crate::scripts::{Grant, Token};
use crate::system::{Client, Kind, LockModel, Role, State};

impl LockModel {
    /// The properties checked of this model: the common ones, and its kind's.
    pub(super) fn checked_properties(&self) -> Vec<Property<Self>> {
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

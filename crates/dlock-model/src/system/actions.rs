//! The client's and the clock's steps: which are enabled in a state, and what each does to
//! the keys, the beliefs and the ghost history.

use crate::scripts::{Grant, Token};
use crate::system::{fence_drawn, Action, Client, LockModel, Role, State};

impl LockModel {
    /// The steps enabled in `state` (stateright's `actions`).
    pub(super) fn enabled_actions(&self, state: &State, actions: &mut Vec<Action>) {
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

    /// The state after `action` (stateright's `next_state`); `None` when nothing changes.
    pub(super) fn step(&self, last: &State, action: Action) -> Option<State> {
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
}

//! Guarded writes (`crates/dlock/src/guarded/`): a holder's batch of commands on data keys
//! beside the lock, applied by one script only while its hold holds, and answered from a
//! record when it is resent. [`GuardedKeys::apply`] is `guarded/apply.lua` as a transition
//! (the hold is the plain mutex's, `scripts::Server`); [`GuardedModel`] checks it with two
//! clients that take the lock in turn, apply batches (their replies lost and resent),
//! renew, release and pause past their lease.
//! `tests/conformance/guarded.rs` runs the real script beside [`GuardedKeys::apply`].

use std::collections::BTreeMap;

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

/// A batch's id (the library draws a random one per batch; a resend carries it again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId {
    /// The client that sent it.
    pub client: u8,
    /// Its number among the client's batches.
    pub number: u8,
}

/// One command of a batch on a data key (named by a small number), as `Guarded` builds
/// them: the ones the conformance run sends, enough to meet every branch of the script
/// (a reply of each type, a refused command, a batch of reads alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// `GET key`: a read.
    Get(u8),
    /// `INCRBY key by`.
    IncrBy(u8, i64),
    /// `RPUSH key value`.
    RPush(u8, u8),
    /// `DEL key`.
    Del(u8),
}

impl Command {
    /// The data key it names.
    pub fn key(self) -> u8 {
        match self {
            Command::Get(k) | Command::IncrBy(k, _) | Command::RPush(k, _) | Command::Del(k) => k,
        }
    }

    /// Whether it only reads (guarded/mod.rs `READS`).
    pub fn reads(self) -> bool {
        matches!(self, Command::Get(_))
    }
}

/// What a data key holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Data {
    /// A string holding an integer.
    Int(i64),
    /// A list.
    List(Vec<u8>),
}

/// One command's reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// An integer.
    Int(i64),
    /// A string (`GET` of an integer: its digits).
    Text(String),
    /// Nothing (`GET` of a missing key).
    Nil,
}

/// What `guarded/apply.lua` answers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// `{1, replies}`: applied.
    Applied(Vec<Reply>),
    /// `{2, n, error}`: the n-th command (from 1) was refused with WRONGTYPE; those before
    /// it stay applied.
    Refused(u8),
    /// `{0}`: not held, nothing applied.
    NotHeld,
}

/// A batch: its id and its commands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Batch {
    /// Its id.
    pub id: BatchId,
    /// Its commands, in order.
    pub commands: Vec<Command>,
}

impl Batch {
    /// guarded/mod.rs `writes`: a batch of reads alone is not recorded (`ARGV[4]` `0`).
    pub fn writes(&self) -> bool {
        self.commands.iter().any(|c| !c.reads())
    }
}

/// The keys beside the lock that guarded writes use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuardedKeys {
    /// The data keys (`{N}:data:KEY`), none of which expires here.
    pub data: BTreeMap<u8, Data>,
    /// Each holder's record of its last batch (`{N}:applied:<token>`): the batch's id,
    /// what it answered, and when the record expires.
    pub records: BTreeMap<Token, (BatchId, Answer, Time)>,
}

impl GuardedKeys {
    /// Redis's expiry, made explicit: a record whose time came is gone.
    pub fn expire(&mut self, now: Time) {
        self.records.retain(|_, record| record.2 > now);
    }

    /// One command on its data key, as Redis runs it (`redis.pcall`): its reply, or
    /// `None` for WRONGTYPE (nothing changed).
    fn run(&mut self, command: Command) -> Option<Reply> {
        let key = command.key();
        let value = self.data.get(&key).cloned();
        match (command, value) {
            (Command::Get(_), None) => Some(Reply::Nil),
            (Command::Get(_), Some(Data::Int(n))) => Some(Reply::Text(n.to_string())),
            (Command::IncrBy(_, by), None) => {
                self.data.insert(key, Data::Int(by));
                Some(Reply::Int(by))
            }
            (Command::IncrBy(_, by), Some(Data::Int(n))) => {
                self.data.insert(key, Data::Int(n + by));
                Some(Reply::Int(n + by))
            }
            (Command::RPush(_, v), None) => {
                self.data.insert(key, Data::List(vec![v]));
                Some(Reply::Int(1))
            }
            (Command::RPush(_, v), Some(Data::List(mut list))) => {
                list.push(v);
                let len = list.len() as i64;
                self.data.insert(key, Data::List(list));
                Some(Reply::Int(len))
            }
            (Command::Del(_), value) => {
                self.data.remove(&key);
                Some(Reply::Int(i64::from(value.is_some())))
            }
            (Command::Get(_) | Command::IncrBy(..), Some(Data::List(_)))
            | (Command::RPush(..), Some(Data::Int(_))) => None,
        }
    }

    /// guarded/apply.lua for a string hold (kind `s`) at `lock`, `record_ttl` its `ARGV[4]`
    /// in ticks (0 for a batch of reads: not recorded). Returns the answer and whether the
    /// commands ran (not a refusal for the hold, not an answer from the record).
    pub fn apply(
        &mut self,
        lock: &Server,
        token: Token,
        batch: &Batch,
        record_ttl: Time,
        now: Time,
        mutants: &[Mutant],
    ) -> (Answer, bool) {
        // local record = GET KEYS[2]; the same id: the recorded answer, nothing applied.
        if !mutants.contains(&Mutant::ResendAppliesTwice) {
            if let Some((id, answer, _)) = self.records.get(&token).filter(|r| r.2 > now) {
                if *id == batch.id {
                    return (answer.clone(), false);
                }
            }
        }
        // hold_state('s', ...): the lock key holds our token.
        if !mutants.contains(&Mutant::ApplyWithoutHoldCheck) && lock.holder(now) != Some(token) {
            return (Answer::NotHeld, false);
        }
        // Each command in order; the first refused ends the batch (no rollback).
        let mut replies = Vec::new();
        let mut answer = None;
        for (n, &command) in batch.commands.iter().enumerate() {
            match self.run(command) {
                Some(reply) => replies.push(reply),
                None => {
                    answer = Some(Answer::Refused(n as u8 + 1));
                    break;
                }
            }
        }
        let answer = answer.unwrap_or(Answer::Applied(replies));
        // SET KEYS[2] id .. ' ' .. answer PX ARGV[4], unless ARGV[4] is '0'.
        if record_ttl > 0 {
            self.records
                .insert(token, (batch.id, answer.clone(), now + record_ttl));
        }
        (answer, true)
    }
}

/// A batch whose reply was lost: the library resends it once on the reconnected connection
/// (script.rs `resent_once`), only before the record's lease from the first send has passed
/// (`Call::resend_within`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pending {
    /// The batch.
    pub id: BatchId,
    /// When its first send ran (0 once it no longer matters).
    pub sent: Time,
    /// Ghost: whether the first send applied the commands.
    pub ran: bool,
    /// Ghost: what the first send answered (the data key's value after it, or not held).
    pub answer: Option<i64>,
}

/// What a client believes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Holds nothing.
    Idle,
    /// Was granted `token`, valid by its own clock until `until` (0 once passed: a paused
    /// holder that wakes still has its guard and may send a batch).
    Holding {
        /// The hold's token.
        token: Token,
        /// The end of its validity.
        until: Time,
        /// A batch whose reply was lost, to be resent.
        pending: Option<Pending>,
    },
}

/// A model of guarded writes over the plain mutex.
#[derive(Clone, Debug)]
pub struct GuardedModel {
    /// Shown in reports.
    pub name: &'static str,
    /// How many clients.
    pub clients: usize,
    /// The lease, in ticks; the record of a batch is kept as long (guarded/mod.rs:
    /// `record_ms` is the lock's ttl).
    pub ttl: Time,
    /// The clock stops here.
    pub max_time: Time,
    /// Holds each client may be granted.
    pub max_holds: u8,
    /// Batches each client may send.
    pub max_batches: u8,
    /// The resend comes while the first send's record lives (within a lease of it): the
    /// assumption the record's expiry makes. False lets it come at any later time.
    pub resend_within_record: bool,
    /// Bugs put in on purpose.
    pub mutants: Vec<Mutant>,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock.
    pub now: Time,
    /// The lock's keys.
    pub server: Server,
    /// The data keys and the batch records.
    pub keys: GuardedKeys,
    /// Each client's belief.
    pub clients: Vec<Client>,
    /// Tokens each client has used.
    pub attempts: Vec<u8>,
    /// Batches each client has sent.
    pub batches: Vec<u8>,
    /// Ghost: a batch ran while its token did not hold the lock.
    pub applied_unheld: bool,
    /// Ghost: a resent batch ran though its first send had.
    pub applied_twice: bool,
    /// Ghost: a resend was answered otherwise than its first send ran.
    pub misanswered: bool,
    /// Ghost: a resend was answered from the record.
    pub from_record: bool,
    /// Ghost: a batch of a holder past its lease was refused.
    pub late_refused: bool,
    /// Ghost: the client whose batch ran last, and whether two clients' batches ran in
    /// turn.
    pub last_ran: Option<u8>,
    /// Ghost: two clients' batches ran in turn.
    pub turns: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Client `c` attempts the lock.
    Acquire(usize),
    /// Client `c` releases.
    Release(usize),
    /// Client `c`'s renewal runs and is answered.
    Renew(usize),
    /// Client `c` applies a new batch and hears the answer.
    Apply(usize),
    /// Client `c`'s new batch runs, and its reply is lost.
    ApplyLost(usize),
    /// Client `c` resends its batch (the same id) and hears the answer.
    Resend(usize),
}

/// The data key the model's batches increment.
const COUNTER: u8 = 0;

/// The value of the data key the batches increment, as an answer shows it.
fn heard(answer: &Answer) -> Option<i64> {
    match answer {
        Answer::Applied(replies) => match replies.first() {
            Some(Reply::Int(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

impl GuardedModel {
    /// Runs client `c`'s batch `id` with `token`; records what it did in the ghosts.
    fn apply(&self, state: &mut State, c: usize, token: Token, id: BatchId) -> (Answer, bool) {
        let batch = Batch {
            id,
            commands: vec![Command::IncrBy(COUNTER, 1)],
        };
        let held = state.server.holder(state.now) == Some(token);
        let (answer, ran) = state.keys.apply(
            &state.server,
            token,
            &batch,
            self.ttl,
            state.now,
            &self.mutants,
        );
        if ran {
            state.applied_unheld |= !held;
            state.turns |= state.last_ran.is_some_and(|last| last != c as u8);
            state.last_ran = Some(c as u8);
        }
        (answer, ran)
    }
}

impl Model for GuardedModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            server: Server::default(),
            keys: GuardedKeys::default(),
            clients: vec![Client::Idle; self.clients],
            attempts: vec![0; self.clients],
            batches: vec![0; self.clients],
            applied_unheld: false,
            applied_twice: false,
            misanswered: false,
            from_record: false,
            late_refused: false,
            last_ran: None,
            turns: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle if state.attempts[c] < self.max_holds => {
                    actions.push(Action::Acquire(c));
                }
                Client::Holding { until, pending, .. } => {
                    actions.push(Action::Release(c));
                    // The renewer works beside a batch in flight, while the lease is valid.
                    if *until > state.now {
                        actions.push(Action::Renew(c));
                    }
                    match pending {
                        // One batch at a time (the guard's lock).
                        None if state.batches[c] < self.max_batches => {
                            actions.push(Action::Apply(c));
                            actions.push(Action::ApplyLost(c));
                        }
                        Some(_) => actions.push(Action::Resend(c)),
                        None => {}
                    }
                }
                Client::Idle => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => state.now += 1,
            Action::Acquire(c) => {
                let token = Token {
                    client: c as u8,
                    attempt: state.attempts[c],
                };
                let grant = state
                    .server
                    .mutex_acquire(token, now, self.ttl, false, &self.mutants);
                if grant == Grant::Busy {
                    return None;
                }
                state.attempts[c] += 1;
                state.clients[c] = Client::Holding {
                    token,
                    until: now + self.ttl,
                    pending: None,
                };
            }
            Action::Release(c) => {
                let Client::Holding { token, .. } = state.clients[c] else {
                    return None;
                };
                state.server.mutex_release(token, now, &self.mutants);
                state.clients[c] = Client::Idle;
            }
            Action::Renew(c) => {
                let Client::Holding { token, pending, .. } = state.clients[c] else {
                    return None;
                };
                if !state.server.renew_string(token, now, self.ttl) {
                    // Lost: the guard stays with the client until it is dropped, and a
                    // batch may still be sent (the script decides).
                    return None;
                }
                state.clients[c] = Client::Holding {
                    token,
                    until: now + self.ttl,
                    pending,
                };
            }
            Action::Apply(c) | Action::ApplyLost(c) => {
                let Client::Holding { token, until, .. } = state.clients[c] else {
                    return None;
                };
                let id = BatchId {
                    client: c as u8,
                    number: state.batches[c],
                };
                state.batches[c] += 1;
                let (answer, ran) = self.apply(&mut state, c, token, id);
                state.late_refused |= answer == Answer::NotHeld && until <= now;
                let pending = matches!(action, Action::ApplyLost(_)).then_some(Pending {
                    id,
                    sent: now,
                    ran,
                    answer: heard(&answer),
                });
                state.clients[c] = Client::Holding {
                    token,
                    until,
                    pending,
                };
            }
            Action::Resend(c) => {
                let Client::Holding {
                    token,
                    until,
                    pending: Some(pending),
                } = state.clients[c]
                else {
                    return None;
                };
                let (answer, ran) = self.apply(&mut state, c, token, pending.id);
                state.applied_twice |= ran && pending.ran;
                state.misanswered |= heard(&answer) != pending.answer;
                state.from_record |= pending.ran && !ran;
                state.clients[c] = Client::Holding {
                    token,
                    until,
                    pending: None,
                };
            }
        }
        state.server.expire(state.now);
        state.keys.expire(state.now);
        let ttl = self.ttl;
        let bounded = self.resend_within_record;
        for client in &mut state.clients {
            if let Client::Holding { until, pending, .. } = client {
                if *until <= state.now {
                    *until = 0;
                }
                // A resend later than the record's life: none (the call failed), or one
                // whose time no longer matters.
                if let Some(p) = pending.filter(|p| p.sent + ttl <= state.now) {
                    *pending = (!bounded).then_some(Pending { sent: 0, ..p });
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a batch applies only while its hold holds",
                |_, state: &State| !state.applied_unheld,
            ),
            Property::always("a resent batch applies once", |_, state: &State| {
                !state.applied_twice
            }),
            Property::always(
                "a resent batch is answered as it ran",
                |_, state: &State| !state.misanswered,
            ),
            Property::sometimes(
                "a resent batch is answered from its record",
                |_, state: &State| state.from_record,
            ),
            Property::sometimes(
                "a batch of a holder past its lease is refused",
                |_, state: &State| state.late_refused,
            ),
            Property::sometimes("two holders' batches apply in turn", |_, state: &State| {
                state.turns
            }),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.max_time
    }
}

impl GuardedModel {
    /// Whether `mutant`'s bug is in a transition this model takes.
    pub fn touched_by(&self, mutant: Mutant) -> bool {
        matches!(
            mutant,
            Mutant::ApplyWithoutHoldCheck
                | Mutant::ResendAppliesTwice
                | Mutant::ReleaseWithoutOwnerCheck
        )
    }
}

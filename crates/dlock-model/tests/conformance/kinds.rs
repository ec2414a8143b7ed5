//! States of one lock name built by the real scripts of every kind, beside the model's
//! transitions (`src/scripts/`): what the scripts that look at a lock or act on it from
//! outside its holder (`admin.rs`, `tokens.rs`) are run over. The lock is named `a`, its
//! keys and channels as the library names them (`dlock::__lock_names`).

use dlock_model::admin::Form;
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::rngs::StdRng;
use rand::Rng;

use dlock::__scripts::{
    AcquireReply, FairAcquire, FairRelease, LockKeys, MutexAcquire, MutexRelease, QueueKeys,
    ReadAcquire, ReadRelease, ReentrantAcquire, ReentrantRelease, WriteAcquire, WriteRelease,
};

use super::fair::{fair_scripts_for, FairScripts};
use super::harness::{
    entries_at, same, tick_keys, token_text, waiter_text, Fences, SLACK_MS, TICK_MS, TTL,
    WAITER_LEASE,
};
use super::library::send;
use super::mutex::{scripts_for, Scripts};
use super::reentrant::{reentrant_scripts_for, ReentrantScripts};
use super::rwlock::{rw_scripts_for, RwScripts};
use super::semaphore::{semaphore_scripts_for, SemaphoreScripts};

/// The kind whose scripts build a run's states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mutex,
    Fair,
    Semaphore,
    RwLock,
    Reentrant,
}

impl Kind {
    /// The kind of a run with this seed: every kind in turn.
    pub fn of_seed(seed: u64) -> Kind {
        [
            Kind::Mutex,
            Kind::Fair,
            Kind::Semaphore,
            Kind::RwLock,
            Kind::Reentrant,
        ][(seed % 5) as usize]
    }
}

/// The name of every run's lock.
pub const LOCK: &str = "a";
/// The permits of the semaphore.
const PERMITS: usize = 2;
/// The owner of each client's reentrant holds: clients 0 and 1 are one owner's.
const OWNERS: [u8; 3] = [0, 0, 1];

/// A read hold's owner in the model: each read hold here is its own owner (the script is
/// sent the hold's token as its owner), so one id per token (a run's 40 steps keep a
/// client's attempts below 64).
fn owner_of(token: Token) -> u8 {
    assert!(token.attempt < 64 && token.client < 3);
    token.client * 64 + token.attempt
}

/// The keys and channels of the lock `a`, as the library names them.
pub struct Names {
    pub key: String,
    pub fence: String,
    pub queue: String,
    pub leases: String,
    pub expiry: String,
    pub forced: String,
}

impl Names {
    pub fn of(name: &str) -> Names {
        let named = dlock::__lock_names("", name).unwrap();
        let get = |what: &str| {
            named
                .iter()
                .find(|(w, _)| *w == what)
                .map(|(_, n)| n.clone())
                .unwrap()
        };
        Names {
            key: get("key"),
            fence: get("fence"),
            queue: get("queue"),
            leases: get("queue-leases"),
            expiry: get("expiry"),
            forced: get("forced"),
        }
    }
}

/// Every kind's keys for the lock `a`, as the library names them for that kind (and the
/// tests' own ticks).
pub struct KindScripts {
    mutex: Scripts,
    fair: FairScripts,
    semaphore: SemaphoreScripts,
    rw: RwScripts,
    reentrant: ReentrantScripts,
}

impl KindScripts {
    pub fn new() -> KindScripts {
        KindScripts {
            mutex: scripts_for(LOCK),
            fair: fair_scripts_for(LOCK),
            semaphore: semaphore_scripts_for(LOCK),
            rw: rw_scripts_for(LOCK),
            reentrant: reentrant_scripts_for(LOCK),
        }
    }

    /// The lock's keys (every kind's are alike).
    pub fn keys(&self) -> &LockKeys {
        &self.mutex.keys
    }

    /// Its waiter line, as the scripts that look from outside name it.
    pub fn queue(&self) -> &QueueKeys {
        &self.fair.queue
    }
}

/// One run: the lock's keys on the server and in the model, built by one kind's scripts.
pub struct Run<'a> {
    pub conn: &'a mut redis::Connection,
    pub rng: StdRng,
    pub kind: Kind,
    pub names: Names,
    pub model: Server,
    pub now: u8,
    pub attempts: [u8; 3],
    /// Whether each client's latest token is a write (the read-write lock).
    pub writes: [bool; 3],
    pub fences: Fences,
    pub mutants: Vec<Mutant>,
    /// Releases that handed the lock to a waiter.
    pub hand_offs: usize,
}

impl<'a> Run<'a> {
    pub fn new(seed: u64, conn: &'a mut redis::Connection, mutants: &[Mutant]) -> Run<'a> {
        use rand::SeedableRng;
        let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
        Run {
            conn,
            rng: StdRng::seed_from_u64(seed),
            kind: Kind::of_seed(seed),
            names: Names::of(LOCK),
            model: Server::default(),
            now: 0,
            attempts: [0; 3],
            writes: [false; 3],
            fences: Fences::default(),
            mutants: mutants.to_vec(),
            hand_offs: 0,
        }
    }

    /// The latest token of `client`.
    pub fn latest(&self, client: u8) -> Token {
        Token {
            client,
            attempt: self.attempts[client as usize].saturating_sub(1),
        }
    }

    /// The form of `client`'s latest hold in this run.
    pub fn form_of(&self, client: u8) -> Form {
        match self.kind {
            Kind::Reentrant => Form::Reentrant,
            _ if self.is_string(client) => Form::String,
            _ => Form::Entry,
        }
    }

    /// The form a script is asked with about `client`'s latest hold: its own with
    /// probability `own`, else a string's asked of a hash or the reverse (a hold of another
    /// kind at the key is not ours). An entry's form is not asked of a reentrant hash, nor
    /// a reentrant hold's of a hash of entries: the library never does.
    pub fn asked_form(&mut self, client: u8, own: f64) -> Form {
        let form = self.form_of(client);
        if self.rng.random_bool(own) {
            return form;
        }
        match form {
            Form::String if self.kind == Kind::RwLock => Form::Entry,
            Form::String => Form::Reentrant,
            _ => Form::String,
        }
    }

    /// A token as this run's kind writes it (a fair waiter's names its ttl).
    pub fn text(&self, token: Token) -> String {
        match self.kind {
            Kind::Fair => waiter_text(token),
            _ => token_text(token),
        }
    }

    /// Whether `token` of `client` is a string hold (mutex, fair mutex, write lock).
    pub fn is_string(&self, client: u8) -> bool {
        match self.kind {
            Kind::Mutex | Kind::Fair => true,
            Kind::RwLock => self.writes[client as usize],
            Kind::Semaphore | Kind::Reentrant => false,
        }
    }

    /// A step of the kind's own scripts (an acquire, its resend, a release) or a tick,
    /// beside the model's transitions; replies compared.
    pub fn kind_step(&mut self, ks: &KindScripts, context: &str) -> Result<(), String> {
        let client = self.rng.random_range(0..3u8);
        let c = client as usize;
        let lease_ms = u64::from(TTL) * TICK_MS;
        let m = &self.mutants;
        let now = self.now;
        match self.rng.random_range(0..8) {
            choice @ 0..=3 => {
                let (token, write) = if choice <= 2 || self.attempts[c] == 0 {
                    self.attempts[c] += 1;
                    self.writes[c] = self.kind == Kind::RwLock && choice == 2;
                    (self.latest(client), self.writes[c])
                } else {
                    (self.latest(client), self.writes[c]) // a resend
                };
                let text = self.text(token);
                let (expected, reply): (Grant, Vec<i64>) = match self.kind {
                    Kind::Mutex => (
                        self.model.mutex_acquire(token, now, TTL, true, m),
                        send::<AcquireReply>(
                            &MutexAcquire {
                                keys: &ks.mutex.keys,
                                token: &text,
                                lease_ms,
                                eager: true,
                                tell_clock: false,
                            },
                            self.conn,
                        )
                        .0,
                    ),
                    Kind::Fair => (
                        self.model
                            .fair_acquire(token, now, TTL, WAITER_LEASE, true, m),
                        send(
                            &FairAcquire {
                                keys: &ks.fair.keys,
                                queue: &ks.fair.queue,
                                token: &text,
                                lease_ms,
                                waiter_lease_ms: u64::from(WAITER_LEASE) * TICK_MS,
                                join_queue: true,
                            },
                            self.conn,
                        ),
                    ),
                    Kind::Semaphore => (
                        self.model
                            .permit_acquire(token, now, TTL, PERMITS, TTL, false, m),
                        ks.semaphore.acquire(&text, PERMITS, false, self.conn),
                    ),
                    Kind::RwLock if write => (
                        self.model.write_acquire(token, now, TTL, TTL, false, m),
                        send(
                            &WriteAcquire {
                                lock: ks.rw.lock(),
                                token: &text,
                                lease_ms,
                                waiter_lease_ms: lease_ms,
                                join_queue: false,
                            },
                            self.conn,
                        ),
                    ),
                    Kind::RwLock => (
                        self.model
                            .read_acquire(owner_of(token), owner_of, token, now, TTL, m),
                        send(
                            &ReadAcquire {
                                lock: ks.rw.lock(),
                                owner: &text,
                                lease_ms,
                                token: &text,
                            },
                            self.conn,
                        ),
                    ),
                    Kind::Reentrant => (
                        (self.model).reentrant_acquire(OWNERS[c], token, now, TTL, m),
                        send(
                            &ReentrantAcquire {
                                keys: &ks.reentrant.keys,
                                owner: &format!("o{}", OWNERS[c]),
                                lease_ms,
                                token: &text,
                            },
                            self.conn,
                        ),
                    ),
                };
                match (reply.as_slice(), expected) {
                    ([1, fence, ..], Grant::Granted(Some(modelled))) => {
                        self.fences.check(*fence as u64, modelled, context)?
                    }
                    ([0, ..], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            4 | 5 => {
                let token = self.latest(client);
                let text = self.text(token);
                let (expected, released): (bool, i64) = match self.kind {
                    Kind::Mutex => (
                        self.model.mutex_release(token, now, m),
                        send(
                            &MutexRelease {
                                keys: &ks.mutex.keys,
                                token: &text,
                            },
                            self.conn,
                        ),
                    ),
                    Kind::Fair => {
                        let (released, handed) = self.model.fair_release(token, now, TTL, m);
                        let release = FairRelease {
                            keys: &ks.fair.keys,
                            queue: &ks.fair.queue,
                            token: &text,
                        };
                        let reply = send(&release, self.conn);
                        self.hand_offs += usize::from(handed.is_some());
                        (released, reply)
                    }
                    Kind::Semaphore => (
                        self.model.permit_release(token, now, TTL, PERMITS, m).0,
                        ks.semaphore.release(&text, PERMITS, self.conn),
                    ),
                    Kind::RwLock if self.writes[c] => (
                        self.model.write_release(token, now, TTL, m).0,
                        send(
                            &WriteRelease {
                                lock: ks.rw.lock(),
                                token: &text,
                            },
                            self.conn,
                        ),
                    ),
                    Kind::RwLock => (
                        self.model.read_release(token, now, TTL, m).0,
                        send(
                            &ReadRelease {
                                lock: ks.rw.lock(),
                                token: &text,
                                owner: &text,
                            },
                            self.conn,
                        ),
                    ),
                    Kind::Reentrant => {
                        let released = (self.model).reentrant_release(OWNERS[c], token, now, m);
                        let release = ReentrantRelease {
                            keys: &ks.reentrant.keys,
                            owner: &format!("o{}", OWNERS[c]),
                            token: &text,
                        };
                        let left: i64 = send(&release, self.conn);
                        (released, i64::from(left >= 0))
                    }
                };
                same(released == 1, expected, context)?;
            }
            _ => self.tick(ks),
        }
        Ok(())
    }

    /// The clock moves a tick, on the server too: every lease a tick shorter (entries'
    /// ends and waiter leases moved a tick earlier, so the scripts' own `end <= now`
    /// decides). The fencing counter never expires, and the record of forced releases
    /// outlives a run.
    pub fn tick(&mut self, ks: &KindScripts) {
        self.now += 1;
        self.model.expire(self.now);
        let n = &self.names;
        match self.kind {
            Kind::Semaphore | Kind::RwLock => {
                let _: () = (ks.semaphore.shift.key(&n.key).key(&n.expiry))
                    .arg(TICK_MS)
                    .invoke(self.conn)
                    .unwrap();
            }
            Kind::Fair => {
                let _: () = (ks.fair.shift.key(&n.key).key(&n.leases).key(&n.queue))
                    .arg(TICK_MS)
                    .arg(SLACK_MS)
                    .invoke(self.conn)
                    .unwrap();
            }
            Kind::Mutex | Kind::Reentrant => tick_keys(self.conn, &[&n.key]),
        }
    }

    /// The holds on the server now, sorted: a string's token, a reentrant hash's holds, a
    /// hash of entries' live ones.
    pub fn holds_on_server(&mut self) -> Vec<String> {
        let key = self.names.key.clone();
        let kind: String = redis::cmd("TYPE").arg(&key).query(self.conn).unwrap();
        match kind.as_str() {
            "string" => vec![redis::cmd("GET").arg(&key).query(self.conn).unwrap()],
            "hash" => {
                let reentrant: Option<String> = redis::cmd("HGET")
                    .arg(&key)
                    .arg("~kind")
                    .query(self.conn)
                    .unwrap();
                if reentrant.as_deref() == Some("reentrant") {
                    let fields: Vec<String> =
                        redis::cmd("HKEYS").arg(&key).query(self.conn).unwrap();
                    let mut holds: Vec<String> = fields
                        .iter()
                        .filter_map(|f| f.strip_prefix("h:").map(str::to_string))
                        .collect();
                    holds.sort();
                    holds
                } else {
                    entries_at(self.conn, &key).0
                }
            }
            _ => Vec::new(),
        }
    }

    /// The model's holds now, as the server writes them, sorted.
    pub fn holds_in_model(&self) -> Vec<String> {
        let now = self.now;
        let mut holds: Vec<String> = if let Some(holder) = self.model.holder(now) {
            vec![self.text(holder)]
        } else if let Some(hash) = self.model.reentrant_at(now) {
            hash.holds.iter().map(|&t| self.text(t)).collect()
        } else {
            self.model.live_entries(now).map(|t| self.text(t)).collect()
        };
        holds.sort();
        holds
    }

    /// The keys on the server against the model's: the holds, the fencing counter, the
    /// live waiters in line.
    pub fn compare(&mut self, context: &str) -> Result<(), String> {
        let server = self.holds_on_server();
        same(server, self.holds_in_model(), &format!("{context}: holds"))?;
        let fence = self.names.fence.clone();
        (self.fences).check_counter(self.conn, &fence, self.model.counter, context)?;
        let line = live_waiters_at(self.conn, &self.names);
        let modelled: Vec<String> = self.model.live_waiters(self.now).map(waiter_text).collect();
        same(line, modelled, &format!("{context}: the line"))
    }
}

/// The waiters in line whose waiter lease has not ended (by the server's clock), in order.
pub fn live_waiters_at(conn: &mut redis::Connection, n: &Names) -> Vec<String> {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    let now_ms = seconds * 1000 + micros / 1000;
    let line: Vec<String> = redis::cmd("ZRANGE")
        .arg(&n.queue)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    line.into_iter()
        .filter(|waiter| {
            let end: Option<f64> = redis::cmd("ZSCORE")
                .arg(&n.leases)
                .arg(waiter)
                .query(conn)
                .unwrap();
            end.is_some_and(|end| end as u64 > now_ms)
        })
        .collect()
}

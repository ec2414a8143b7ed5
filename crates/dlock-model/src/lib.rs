//! Model checks of dlock's lock protocols with [`stateright`]: the Redis side of each
//! modelled kind written from its Lua scripts ([`scripts`]), clients with their beliefs
//! and a clock ([`system`]), Redlock's fence settlement over three masters ([`redlock`]),
//! and deliberate bugs that the checks must catch ([`mutant`]).
//! The binary `dlock-model` runs them; `docs/safety.md` says what each covers.

pub mod election;
pub mod guarded;
pub mod mutant;
pub mod redlock;
pub mod scripts;
pub mod system;

use election::ElectionModel;
use guarded::GuardedModel;
pub mod admin;
pub mod force;
pub mod multi;
pub mod pair;

use mutant::Mutant;
use redlock::RedlockModel;
use stateright::Expectation;
use system::{Kind, LockModel, Role};

/// What a check says of one property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An `always` (or `eventually`) with no counterexample.
    Holds,
    /// An `always` (or `eventually`) with a counterexample.
    Violated,
    /// A `sometimes` whose example was found.
    Reached,
    /// A `sometimes` not found by a hunt for a bug, which stops at the first violation.
    NotLookedFor,
    /// An `always` without a counterexample in a hunt that stopped at another property's
    /// violation: the search did not finish, so it is not known to hold.
    NotFinished,
    /// A `sometimes` never found in a whole search.
    NeverReached,
}

impl Verdict {
    /// Whether a hunt for a bug stopped early: some `always` or `eventually` property was
    /// violated (the search stops at the first).
    pub fn stopped<M: stateright::Model>(
        model: &M,
        discovered: impl Fn(&'static str) -> bool,
    ) -> bool {
        model.properties().iter().any(|property| {
            !matches!(property.expectation, Expectation::Sometimes) && discovered(property.name)
        })
    }

    /// The verdict on a property with `expectation`, `discovered` (a counterexample or an
    /// example found) in a search that was `hunting` a bug or not.
    /// `stopped` says a hunt stopped early, at some property's violation.
    pub fn of(
        expectation: &Expectation,
        discovered: bool,
        hunting: bool,
        stopped: bool,
    ) -> Verdict {
        match (expectation, discovered) {
            (Expectation::Sometimes, true) => Verdict::Reached,
            (Expectation::Sometimes, false) if hunting => Verdict::NotLookedFor,
            (Expectation::Sometimes, false) => Verdict::NeverReached,
            (_, false) if hunting && stopped => Verdict::NotFinished,
            (_, false) => Verdict::Holds,
            (_, true) => Verdict::Violated,
        }
    }

    /// Whether the check passes on this property.
    pub fn passed(self) -> bool {
        !matches!(self, Verdict::Violated | Verdict::NeverReached)
    }

    /// As `dlock-model check` prints it.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "VIOLATED",
            Verdict::Reached => "reached",
            Verdict::NotLookedFor => "not looked for",
            Verdict::NotFinished => "not finished",
            Verdict::NeverReached => "NEVER REACHED",
        }
    }
}

/// The bounds of a check: small enough for CI, large enough to reach every interleaving
/// of two or three holds' lifetimes.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The clock stops here.
    pub max_time: u8,
    /// Holds each client may be granted.
    pub max_holds: u8,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_time: 6,
            max_holds: 2,
        }
    }
}

/// The models `dlock-model check` checks, with `mutants` put in.
pub fn models(bounds: Bounds, mutants: &[Mutant]) -> Vec<LockModel> {
    let model = |name, kind, roles: &[Role]| LockModel {
        name,
        kind,
        roles: roles.to_vec(),
        ttl: 2,
        max_time: bounds.max_time,
        max_holds: bounds.max_holds,
        owners: Vec::new(),
        weights: Vec::new(),
        mutants: mutants.to_vec(),
    };
    // Three clients and a line of waiters: the clock stops a tick earlier, to keep the
    // whole check near half a minute.
    let shorter = |mut model: LockModel| {
        model.max_time = model.max_time.saturating_sub(1).max(2);
        model
    };
    // The queues of the semaphore and the rwlock's writers: models of their own, smaller
    // than the ones without a queue (each client is granted one hold; a wait, its direct
    // grant and a downgrade are all within it), to keep the whole check within its time.
    let queued = |mut model: LockModel| {
        model.max_holds = 1;
        model
    };
    use Role::{Exclusive, Owner, Permit, Reader};
    vec![
        model(
            "mutex (fence on first read)",
            Kind::Mutex { eager: false },
            &[Exclusive, Exclusive],
        ),
        model(
            "mutex (fence at grant)",
            Kind::Mutex { eager: true },
            &[Exclusive, Exclusive],
        ),
        model(
            "rwlock",
            Kind::RwLock { waiter_lease: None },
            &[Reader, Reader, Exclusive],
        ),
        model(
            "rwlock, two writers",
            Kind::RwLock { waiter_lease: None },
            &[Exclusive, Exclusive, Reader],
        ),
        model(
            "semaphore of 2",
            Kind::Semaphore {
                permits: 2,
                waiter_lease: None,
            },
            &[Permit, Permit, Permit],
        ),
        shorter(model(
            "fair mutex",
            Kind::Fair { waiter_lease: 2 },
            &[Exclusive, Exclusive, Exclusive],
        )),
        model(
            "reentrant mutex",
            Kind::Reentrant,
            &[Owner(0), Owner(0), Owner(1)],
        ),
        queued(model(
            "semaphore of 2, waiting in line",
            Kind::Semaphore {
                permits: 2,
                waiter_lease: Some(2),
            },
            &[Permit, Permit, Permit],
        )),
        // Two waiters behind one holder: the order in which a release hands on.
        queued(model(
            "semaphore of 1, waiting in line",
            Kind::Semaphore {
                permits: 1,
                waiter_lease: Some(2),
            },
            &[Permit, Permit, Permit],
        )),
        // The reader reads for the first writer's owner: it re-enters the read hold that
        // writer's downgrade made, even while the other writer waits.
        queued(LockModel {
            owners: vec![0, 1, 0],
            ..model(
                "rwlock, writers in line (downgrade, read re-entry)",
                Kind::RwLock {
                    waiter_lease: Some(2),
                },
                &[Exclusive, Exclusive, Reader],
            )
        }),
        // Weighted permits (`lock_many`): two requests of 2 and one of 1 in a semaphore of
        // 3. Two of 2 never fit together, and a request of 2 first in line is not passed
        // by the request of 1 though one permit is free.
        queued(LockModel {
            weights: vec![2, 2, 1],
            ..model(
                "semaphore of 3, weights 2, 2 and 1, waiting in line",
                Kind::Semaphore {
                    permits: 3,
                    waiter_lease: Some(2),
                },
                &[Permit, Permit, Permit],
            )
        }),
    ]
}

/// The Redlock models `dlock-model check` checks, with `mutants` put in: the fence
/// settlement with counters alone (no master restarts: with counters alone a master
/// restarted empty does break the order, which a test shows); with the clock floor while
/// one master restarts empty; and with the clock floor while one master's clock runs ahead
/// of the others' by less than a lease, the masters keeping their data; then a master's
/// clock jumping forward by more than a lease, with counters alone and with the clock
/// floor (mutual exclusion broken by design there: they show the double grant and what
/// becomes of the fences).
pub fn redlock_models(bounds: Bounds, mutants: &[Mutant]) -> Vec<RedlockModel> {
    // Three masters, each asked on its own, make these the largest models per tick: the
    // clock stops at half the others' bound, and with the floor each client has one round.
    let model = |name, max_rounds: u8, max_restarts, clock_floor| RedlockModel {
        name,
        clients: 2,
        ttl: 2,
        max_time: (bounds.max_time / 2).max(2),
        max_rounds: max_rounds.min(bounds.max_holds),
        max_restarts,
        max_jumps: 0,
        max_offsets: 0,
        // Half a lease: less than a lease.
        offset: 1,
        clock_floor,
        mutants: mutants.to_vec(),
    };
    // Master 0's clock may run ahead, once, at any moment: one round each is the two
    // grants its counterexample needs (one fenced by the clock ahead, then one whose
    // majority leaves that master out). With a restart too, the search would be four
    // times the restart's alone.
    let offset = |name| RedlockModel {
        max_offsets: 1,
        ..model(name, 1, 0, true)
    };
    // One jump of one master's clock (which one changes only names), the clock stopping a
    // tick earlier than the other Redlock models' (at a lease at least). With counters
    // alone two rounds each: rounds after the double grant, whose fences the raise must
    // keep in order. With the floor one round each, which shows the double grant (a
    // holder, the jump, a contender) and the jumped clock's fence kept on a majority; two
    // rounds would make that search minutes long.
    let jump = |name, max_rounds: u8, clock_floor| RedlockModel {
        max_jumps: 1,
        max_time: ((bounds.max_time / 2).saturating_sub(1)).max(2),
        ..model(name, max_rounds, 0, clock_floor)
    };
    vec![
        model("redlock, counters only", 2, 0, false),
        model("redlock, clock floor, a master restarted empty", 1, 1, true),
        offset("redlock, clock floor, a master's clock ahead"),
        jump("redlock, counters only, a master's clock jumps", 2, false),
        jump("redlock, clock floor, a master's clock jumps", 1, true),
    ]
}

/// The guarded writes' models `dlock-model check` checks, with `mutants` put in: two
/// clients over the plain mutex, each with two batches, their replies lost and resent
/// within the record's life (`guarded.rs`).
pub fn guarded_models(bounds: Bounds, mutants: &[Mutant]) -> Vec<GuardedModel> {
    vec![GuardedModel {
        name: "guarded writes",
        clients: 2,
        ttl: 2,
        max_time: bounds.max_time,
        max_holds: bounds.max_holds,
        max_batches: 2,
        resend_within_record: true,
        mutants: mutants.to_vec(),
    }]
}

/// The election's models `dlock-model check` checks, with `mutants` put in: two
/// campaigners over the plain mutex with its fence drawn at grant, and an observer
/// (`election.rs`).
pub fn election_models(bounds: Bounds, mutants: &[Mutant]) -> Vec<ElectionModel> {
    vec![ElectionModel {
        name: "election",
        clients: 2,
        ttl: 2,
        max_time: bounds.max_time,
        max_holds: bounds.max_holds,
        mutants: mutants.to_vec(),
    }]
}

/// The models of an operator's forced release racing a lock's clients, with `mutants`
/// put in: the plain mutex (fence drawn at grant) and the fair mutex with waiters in
/// line, two clients each, and an operator who calls twice (a reply may be lost and the
/// call resent, another call coming in between). The operator makes these models large:
/// the clock stops two ticks before the others' (at a lease at least), and the fair
/// mutex's clients hold once each.
pub fn force_models(bounds: Bounds, mutants: &[Mutant]) -> Vec<force::ForceModel> {
    let model = |name, kind, max_holds: u8| force::ForceModel {
        name,
        lock: LockModel {
            name,
            kind,
            roles: vec![Role::Exclusive, Role::Exclusive],
            ttl: 2,
            max_time: bounds.max_time.saturating_sub(2).max(2),
            max_holds: max_holds.min(bounds.max_holds),
            owners: Vec::new(),
            weights: Vec::new(),
            mutants: mutants.to_vec(),
        },
        max_forces: 2,
    };
    vec![
        model("forced release, mutex", Kind::Mutex { eager: true }, 2),
        model(
            "forced release, fair mutex",
            Kind::Fair { waiter_lease: 2 },
            1,
        ),
    ]
}

/// The model of two locks with look-alike names side by side on one keyspace, their keys
/// named by the library, with `mutants` put in.
pub fn pair_models(bounds: Bounds, mutants: &[Mutant]) -> Vec<pair::PairModel> {
    vec![pair::PairModel::new(
        "two look-alike locks side by side",
        &[("acct", "{acct}"), ("x{t}y", "{t}"), ("{t}", "{t}:data")],
        (bounds.max_time / 2).max(2),
        mutants,
    )]
}

/// The multi-lock's models `dlock-model check` checks, with `mutants` put in: two clients
/// each taking both of two names, on one server (one script) and across two Cluster
/// slots (a script per slot, a busy slot giving back the one taken before it).
pub fn multi_models(bounds: Bounds, mutants: &[Mutant]) -> Vec<multi::MultiModel> {
    let model = |name, groups: Vec<Vec<usize>>| multi::MultiModel {
        name,
        groups,
        clients: 2,
        ttl: 2,
        max_time: bounds.max_time.saturating_sub(1).max(2),
        max_waits: bounds.max_holds,
        max_tries: 3,
        mutex_holds: 1,
        // The other kinds' bugs are in scripts this model runs too (the mutex's, the
        // string hand-off): the one-name models find those; this one the multi-lock's.
        mutants: (mutants.iter().copied())
            .filter(|m| multi::MULTI_MUTANTS.contains(m))
            .collect(),
    };
    // Across slots every step is a request of its own: the clock stops a tick earlier,
    // to keep the search within a few seconds.
    let earlier = |mut model: multi::MultiModel| {
        model.max_time = model.max_time.saturating_sub(1).max(2);
        model
    };
    vec![
        model("multi-lock, one server", vec![vec![0, 1]]),
        earlier(model(
            "multi-lock, two Cluster slots",
            vec![vec![0], vec![1]],
        )),
    ]
}

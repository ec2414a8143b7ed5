//! multi/acquire.lua and multi/release.lua (`Client::multi_lock`) run for real beside the
//! model's `multi_acquire` and `multi_release` (`multi.rs`), over three names that fair
//! mutex waiters and plain mutex holders use too: three clients take two or three of the
//! names in random orders (a new wait's attempt, or its token again: a resend), release
//! them (handing each name to its first fair waiter), queue and release as fair mutexes,
//! take a name as a plain mutex; the clock ticks. After every step each name's holder,
//! fencing counter (in the fences' order) and live waiters in line are compared.

use dlock::__scripts::{
    AcquireReply, FairAcquire, FairRelease, LockKeys, MultiAcquire, MultiRelease, MutexAcquire,
};
use dlock_model::multi::{multi_acquire, multi_release, MultiGrant};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::fair::{fair_scripts_for, FairScripts};
use super::harness::{
    line_at, same, waiter_text, Bench, Fences, SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL, WAITER_LEASE,
};
use super::library::send;

/// The names the runs use.
const NAMES: [&str; 3] = ["a", "b", "c"];

/// Each name's keys and line as the library names them (every call is composed from
/// them), and the test's own tick.
pub struct MultiScripts {
    names: Vec<FairScripts>,
    shift: redis::Script,
}

pub fn multi_scripts() -> MultiScripts {
    MultiScripts {
        names: NAMES.iter().map(|name| fair_scripts_for(name)).collect(),
        shift: redis::Script::new(SHIFT_QUEUE),
    }
}

impl MultiScripts {
    /// The keys of the names `named` (indices into [`NAMES`]), in that order.
    fn group(&self, named: &[usize]) -> Vec<&LockKeys> {
        named.iter().map(|&i| &self.names[i].keys).collect()
    }
}

/// What the runs reached.
#[derive(Default, Debug)]
pub struct Reached {
    granted: usize,
    busy: usize,
    /// Busy answers to a token that held some of the names (given back).
    gave_back: usize,
    resent: usize,
    released: usize,
    /// Names a multi-lock's release handed to a fair waiter.
    handed: usize,
}

fn run_multi(
    seed: u64,
    scripts: &MultiScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut Reached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let names = &scripts.names;
    let mut model = vec![Server::default(); NAMES.len()];
    let mut fences: Vec<Fences> = (0..NAMES.len()).map(|_| Fences::default()).collect();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 3];
    // Each client's latest multi-lock's names, in the order it named them.
    let mut named: [Vec<usize>; 3] = Default::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let c = client as usize;
        let latest = Token {
            client,
            attempt: attempts[c].saturating_sub(1),
        };
        let fresh = |attempts: &mut [u8; 3]| {
            let token = Token {
                client,
                attempt: attempts[c],
            };
            attempts[c] += 1;
            token
        };
        let choice = rng.random_range(0..12);
        let n = rng.random_range(0..NAMES.len());
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A multi-lock's attempt: a new wait's, or its token again (a resend, or the
            // next attempt of a wait).
            0..=4 => {
                let token = if choice <= 2 || named[c].is_empty() {
                    let mut order: Vec<usize> = (0..NAMES.len()).collect();
                    order.shuffle(&mut rng);
                    order.truncate(rng.random_range(2..=NAMES.len()));
                    named[c] = order;
                    fresh(&mut attempts)
                } else {
                    reached.resent += 1;
                    latest
                };
                let ours_before = (named[c].iter()).any(|&i| model[i].holder(now) == Some(token));
                let expected = multi_acquire(&mut model, &named[c], token, now, TTL, mutants);
                let acquire = MultiAcquire {
                    names: &scripts.group(&named[c]),
                    token: &waiter_text(token),
                    lease_ms,
                };
                let reply: Vec<i64> = send(&acquire, conn);
                match (reply.split_first(), &expected) {
                    (Some((1, drawn)), MultiGrant::Granted(modelled))
                        if drawn.len() == modelled.len() =>
                    {
                        reached.granted += 1;
                        for ((&i, &fence), &modelled) in named[c].iter().zip(drawn).zip(modelled) {
                            fences[i].check(
                                fence as u64,
                                modelled,
                                &format!("{context}: fence of {}", NAMES[i]),
                            )?;
                        }
                    }
                    (Some((0, _)), MultiGrant::Busy) => {
                        reached.busy += 1;
                        reached.gave_back += usize::from(ours_before);
                    }
                    _ => {
                        return Err(format!(
                        "{context}: multi acquire of {:?} says {reply:?}, the model {expected:?}",
                        named[c]
                    ))
                    }
                }
            }
            5 | 6 => {
                let (expected, handed) =
                    multi_release(&mut model, &named[c], latest, now, TTL, mutants);
                let release = MultiRelease {
                    names: &scripts.group(&named[c]),
                    token: &waiter_text(latest),
                };
                let released: i64 = send(&release, conn);
                same(
                    released,
                    expected as i64,
                    &format!("{context}: multi release of {:?}", named[c]),
                )?;
                reached.released += usize::from(released > 0);
                for (&i, to) in named[c].iter().zip(handed) {
                    if let Some((_, fence)) = to {
                        reached.handed += 1;
                        let counter: u64 = redis::cmd("GET")
                            .arg(&names[i].keys.fence)
                            .query(conn)
                            .unwrap();
                        fences[i].check(counter, fence, &format!("{context}: hand-off fence"))?;
                    }
                }
            }
            // A fair mutex waiter of one name (a new wait, or its next attempt).
            7 => {
                let token = if rng.random_bool(0.5) {
                    fresh(&mut attempts)
                } else {
                    latest
                };
                let expected = model[n].fair_acquire(token, now, TTL, WAITER_LEASE, true, mutants);
                let k = &names[n];
                let acquire = FairAcquire {
                    keys: &k.keys,
                    queue: &k.queue,
                    token: &waiter_text(token),
                    lease_ms,
                    waiter_lease_ms: u64::from(WAITER_LEASE) * TICK_MS,
                    join_queue: true,
                };
                let reply: Vec<i64> = send(&acquire, conn);
                match (reply.as_slice(), expected) {
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        fences[n].check(*fence as u64, modelled, &context)?
                    }
                    ([0, ..], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!(
                            "{context}: fair acquire {other:?}, the model {expected:?}"
                        ))
                    }
                }
            }
            8 => {
                let (expected, handed) = model[n].fair_release(latest, now, TTL, mutants);
                let k = &names[n];
                let release = FairRelease {
                    keys: &k.keys,
                    queue: &k.queue,
                    token: &waiter_text(latest),
                };
                let released: i64 = send(&release, conn);
                same(released == 1, expected, &format!("{context}: fair release"))?;
                if let Some((_, fence)) = handed {
                    let counter: u64 = redis::cmd("GET").arg(&k.keys.fence).query(conn).unwrap();
                    fences[n].check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            // A plain mutex of one name, its fence drawn at grant.
            9 => {
                let token = fresh(&mut attempts);
                let expected = model[n].mutex_acquire(token, now, TTL, true, mutants);
                let k = &names[n];
                let acquire = MutexAcquire {
                    keys: &k.keys,
                    token: &waiter_text(token),
                    lease_ms,
                    eager: true,
                    tell_clock: false,
                };
                let reply = send::<AcquireReply>(&acquire, conn).0;
                match (reply.as_slice(), expected) {
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        fences[n].check(*fence as u64, modelled, &context)?
                    }
                    ([0, _], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!(
                            "{context}: mutex acquire {other:?}, the model {expected:?}"
                        ))
                    }
                }
            }
            _ => {
                now += 1;
                for (server, k) in model.iter_mut().zip(names) {
                    server.expire(now);
                    let _: () = (scripts.shift.key(&k.keys.key))
                        .key(&k.queue.leases)
                        .key(&k.queue.queue)
                        .arg(TICK_MS)
                        .arg(SLACK_MS)
                        .invoke(conn)
                        .unwrap();
                }
            }
        }
        for (i, k) in names.iter().enumerate() {
            let context = format!("{context}: name {}", NAMES[i]);
            let holder: Option<String> = redis::cmd("GET").arg(&k.keys.key).query(conn).unwrap();
            same(
                holder,
                model[i].holder(now).map(waiter_text),
                &format!("{context}: holder"),
            )?;
            fences[i].check_counter(conn, &k.keys.fence, model[i].counter, &context)?;
            same(
                line_at(conn, &k.queue.queue, &k.queue.leases),
                model[i]
                    .live_waiters(now)
                    .map(waiter_text)
                    .collect::<Vec<_>>(),
                &format!("{context}: the line"),
            )?;
        }
    }
    Ok(())
}

/// Every run of the suite, for the coverage test.
pub fn run_multi_suite(seed: u64, conn: &mut redis::Connection) {
    let _ = run_multi(seed, &multi_scripts(), conn, &[], &mut Reached::default());
}

#[test]
fn the_multi_lock_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = multi_scripts();
    let mut reached = Reached::default();
    bench.conforms(200, |seed, conn| {
        run_multi(seed, &scripts, conn, &[], &mut reached)
    });
    let Reached {
        granted,
        busy,
        gave_back,
        resent,
        released,
        handed,
    } = reached;
    for (what, count, least) in [
        ("grants", granted, 300),
        ("busy answers", busy, 300),
        (
            "busy answers that gave back the token's names",
            gave_back,
            5,
        ),
        ("attempts with a token again", resent, 300),
        ("releases", released, 100),
        ("names handed to a fair waiter by a release", handed, 10),
    ] {
        assert!(
            count >= least,
            "only {count} {what} in 200 runs: {reached:?}",
            reached = (granted, busy, gave_back, resent, released, handed)
        );
    }
    // The negative control: each multi-lock bug in the model is told apart from the
    // scripts within the same runs.
    let mutants = [
        Mutant::MultiGrantsPart,
        Mutant::MultiReleasesOneName,
        Mutant::MultiResendRedraws,
    ];
    let mut ignored = Reached::default();
    bench.tells_apart_often(&mutants, 200, 20, |seed, conn, mutant| {
        run_multi(seed, &scripts, conn, &[mutant], &mut ignored)
    });
}

//! multi/acquire.lua and multi/release.lua (`Client::multi_lock`) run for real beside the
//! model's `multi_acquire` and `multi_release` (`multi.rs`), over three names that fair
//! mutex waiters and plain mutex holders use too: three clients take two or three of the
//! names in random orders (a new wait's attempt, or its token again: a resend), release
//! them (handing each name to its first fair waiter), queue and release as fair mutexes,
//! take a name as a plain mutex; the clock ticks. After every step each name's holder,
//! fencing counter (in the fences' order) and live waiters in line are compared.

use dlock_model::multi::{multi_acquire, multi_release, MultiGrant};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use dlock_testkit::RedisServer;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::harness::{
    line_at, same, waiter_text, Fences, SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL, WAITER_LEASE,
};
use super::kinds::Names;
use super::library::LibraryScript;

/// The names the runs use, as the library names their keys.
const NAMES: [&str; 3] = ["a", "b", "c"];

pub struct MultiScripts {
    acquire: LibraryScript,
    release: LibraryScript,
    fair_acquire: LibraryScript,
    fair_release: LibraryScript,
    mutex_acquire: LibraryScript,
    shift: redis::Script,
}

pub fn multi_scripts() -> MultiScripts {
    MultiScripts {
        acquire: LibraryScript::named("multi acquire"),
        release: LibraryScript::named("multi release"),
        fair_acquire: LibraryScript::named("fair mutex acquire"),
        fair_release: LibraryScript::named("fair mutex release"),
        mutex_acquire: LibraryScript::named("mutex acquire"),
        shift: redis::Script::new(SHIFT_QUEUE),
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

/// The four keys a name gives a multi-lock script, and its two arguments.
fn keys_of(names: &Names) -> [&str; 4] {
    [&names.key, &names.fence, &names.queue, &names.leases]
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
    let names: Vec<Names> = NAMES.iter().map(|name| Names::of(name)).collect();
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
                let mut call = scripts.acquire.prepare_invoke();
                for &i in &named[c] {
                    for key in keys_of(&names[i]) {
                        call.key(key);
                    }
                }
                call.arg(waiter_text(token)).arg(lease_ms);
                for &i in &named[c] {
                    call.arg(&names[i].released).arg(&names[i].wake);
                }
                let reply: Vec<i64> = call.invoke(conn).unwrap();
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
                let mut call = scripts.release.prepare_invoke();
                for &i in &named[c] {
                    for key in keys_of(&names[i]) {
                        call.key(key);
                    }
                }
                call.arg(waiter_text(latest));
                for &i in &named[c] {
                    call.arg(&names[i].released).arg(&names[i].wake);
                }
                let released: i64 = call.invoke(conn).unwrap();
                same(
                    released,
                    expected as i64,
                    &format!("{context}: multi release of {:?}", named[c]),
                )?;
                reached.released += usize::from(released > 0);
                for (&i, to) in named[c].iter().zip(handed) {
                    if let Some((_, fence)) = to {
                        reached.handed += 1;
                        let counter: u64 =
                            redis::cmd("GET").arg(&names[i].fence).query(conn).unwrap();
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
                let reply: Vec<i64> = (scripts.fair_acquire.key(&k.key))
                    .key(&k.fence)
                    .key(&k.queue)
                    .key(&k.leases)
                    .arg(waiter_text(token))
                    .arg(lease_ms)
                    .arg(u64::from(WAITER_LEASE) * TICK_MS)
                    .arg(&k.wake)
                    .arg("1")
                    .invoke(conn)
                    .unwrap();
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
                let released: i64 = (scripts.fair_release.key(&k.key))
                    .key(&k.queue)
                    .key(&k.leases)
                    .key(&k.fence)
                    .arg(waiter_text(latest))
                    .arg(&k.wake)
                    .invoke(conn)
                    .unwrap();
                same(released == 1, expected, &format!("{context}: fair release"))?;
                if let Some((_, fence)) = handed {
                    let counter: u64 = redis::cmd("GET").arg(&k.fence).query(conn).unwrap();
                    fences[n].check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            // A plain mutex of one name, its fence drawn at grant.
            9 => {
                let token = fresh(&mut attempts);
                let expected = model[n].mutex_acquire(token, now, TTL, true, mutants);
                let k = &names[n];
                let reply: Vec<i64> = (scripts.mutex_acquire.key(&k.key))
                    .key(&k.fence)
                    .arg(waiter_text(token))
                    .arg(lease_ms)
                    .arg("1")
                    .arg("0")
                    .invoke(conn)
                    .unwrap();
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
                for (server, k) in model.iter_mut().zip(&names) {
                    server.expire(now);
                    let _: () = (scripts.shift.key(&k.key))
                        .key(&k.leases)
                        .key(&k.queue)
                        .arg(TICK_MS)
                        .arg(SLACK_MS)
                        .invoke(conn)
                        .unwrap();
                }
            }
        }
        for (i, k) in names.iter().enumerate() {
            let context = format!("{context}: name {}", NAMES[i]);
            let holder: Option<String> = redis::cmd("GET").arg(&k.key).query(conn).unwrap();
            same(
                holder,
                model[i].holder(now).map(waiter_text),
                &format!("{context}: holder"),
            )?;
            fences[i].check_counter(conn, &k.fence, model[i].counter, &context)?;
            same(
                line_at(conn, &k.queue, &k.leases),
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
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = multi_scripts();
    let mut reached = Reached::default();
    for seed in 0..200 {
        if let Err(divergence) = run_multi(seed, &scripts, &mut conn, &[], &mut reached) {
            panic!("{divergence}");
        }
    }
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
    for mutant in [
        Mutant::MultiGrantsPart,
        Mutant::MultiReleasesOneName,
        Mutant::MultiResendRedraws,
    ] {
        let mut ignored = Reached::default();
        let caught = (0..200)
            .filter(|&seed| run_multi(seed, &scripts, &mut conn, &[mutant], &mut ignored).is_err())
            .count();
        eprintln!("{mutant:?} told apart in {caught} of 200 runs");
        assert!(
            caught >= 20,
            "{mutant:?} told apart in only {caught} of 200 runs"
        );
    }
}

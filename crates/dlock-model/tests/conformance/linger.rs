//! renew/linger.lua (`LockOptions::hold_at_least`: a hold given back early stays until a set
//! time), run for real beside the model's `Server::linger` (`admin.rs`) over states the
//! kinds' own scripts build (`kinds.rs`): a held hold of every form kept until the rest
//! ends (shorter or longer than its lease), a reentrant hold with others given back at
//! once, a hold no longer held untouched, another kind at the key a type error. Replies
//! and keys compared after every step; later ticks show a lease set differently.

use std::time::Duration;

use dlock::__scripts::Linger;
use dlock_model::admin::Lingered;
use dlock_model::mutant::Mutant;
use rand::Rng;

use super::harness::{hold_kind, same, Bench, TICK_MS};
use super::kinds::{KindScripts, Run};
use super::library::try_send;

/// A test-local bug in the model's `linger`, for the negative control.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// The lease is left as it was.
    KeepsTheLease,
    /// A reentrant hold lingers even when its owner has others.
    ReentrantLingersWithOthers,
}

/// The kinds' keys: linger names the lock's keys and line.
struct LingerScripts {
    kinds: KindScripts,
}

fn linger_scripts() -> LingerScripts {
    LingerScripts {
        kinds: KindScripts::new(),
    }
}

/// What the runs reached.
#[derive(Default, Debug)]
struct Reached {
    held: usize,
    given_back: usize,
    not_held: usize,
    refused_kind: usize,
}

fn run_linger(
    seed: u64,
    scripts: &LingerScripts,
    conn: &mut redis::Connection,
    bug: Option<Bug>,
    reached: &mut Reached,
) -> Result<(), String> {
    let mut run = Run::new(seed, conn, &[] as &[Mutant]);
    for step in 0..40 {
        let choice = run.rng.random_range(0..10);
        let client = run.rng.random_range(0..3u8);
        let context = format!(
            "seed {seed} ({:?}), step {step}: choice {choice}, client {client}",
            run.kind
        );
        let now = run.now;
        let token = run.latest(client);
        if choice < 6 {
            run.kind_step(&scripts.kinds, &context)?;
            run.compare(&context)?;
            continue;
        }
        // Mostly the hold's own form (see `Run::asked_form`).
        let form = run.asked_form(client, 0.75);
        // Shorter than the lease, as long, or longer.
        let rest = run.rng.random_range(1..=3u8);
        let linger = Linger {
            keys: scripts.kinds.keys(),
            queue: scripts.kinds.queue(),
            kind: hold_kind(form),
            token: &run.text(token),
            rest: Duration::from_millis(u64::from(rest) * TICK_MS),
        };
        let reply: redis::RedisResult<i64> = try_send(&linger, run.conn);
        let before = run.model.clone();
        let mut expected = run.model.linger(form, token, now, rest);
        match bug {
            Some(Bug::KeepsTheLease) if expected == Ok(Lingered::Held) => {
                run.model = before;
            }
            Some(Bug::ReentrantLingersWithOthers) if expected == Ok(Lingered::GivenBack) => {
                run.model = before;
                let hash = run.model.reentrant.as_mut().expect("held");
                hash.expires = now + rest;
                expected = Ok(Lingered::Held);
            }
            _ => {}
        }
        match (&reply, &expected) {
            (Ok(code), Ok(lingered)) => {
                same(
                    *code,
                    lingered.code(),
                    &format!("{context}: linger {form:?}"),
                )?;
                match lingered {
                    Lingered::Held => reached.held += 1,
                    Lingered::GivenBack => reached.given_back += 1,
                    Lingered::NotHeld => reached.not_held += 1,
                }
            }
            (Ok(-1), Err(_)) => reached.refused_kind += 1,
            _ => {
                return Err(format!(
                    "{context}: linger {form:?} says {reply:?}, the model {expected:?}"
                ))
            }
        }
        run.compare(&context)?;
    }
    Ok(())
}

/// Every run of the suite, for the coverage test.
pub fn run_linger_suite(seed: u64, conn: &mut redis::Connection) {
    let _ = run_linger(seed, &linger_scripts(), conn, None, &mut Reached::default());
}

#[test]
fn linger_does_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = linger_scripts();
    let mut reached = Reached::default();
    bench.conforms(250, |seed, conn| {
        run_linger(seed, &scripts, conn, None, &mut reached)
    });
    let Reached {
        held,
        given_back,
        not_held,
        refused_kind,
    } = reached;
    for (what, count, least) in [
        ("holds kept until the rest ends", held, 200),
        ("reentrant holds given back at once", given_back, 10),
        ("holds not held", not_held, 200),
        ("refusals of another kind at the key", refused_kind, 50),
    ] {
        assert!(count >= least, "only {count} {what} in 250 runs");
    }
    // The negative control: bugs in the model are told apart within the same runs.
    let bugs = [Bug::KeepsTheLease, Bug::ReentrantLingersWithOthers];
    let mut ignored = Reached::default();
    bench.tells_apart(&bugs, 250, |seed, conn, bug| {
        run_linger(seed, &scripts, conn, Some(bug), &mut ignored)
    });
}

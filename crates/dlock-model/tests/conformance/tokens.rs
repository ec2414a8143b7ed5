//! The scripts that ask about or act on a hold by its token alone, run for real beside the
//! model's `admin.rs` over states the kinds' own scripts build (`kinds.rs`): whether a
//! hold is still held (renew/held.lua, asked with the hold's own form and with another
//! one), and a release by token whatever kind took it (release_token.lua: a string hold
//! released and handed to the first in line; a hash at the key is a type error). Replies
//! and keys compared after every step.

use dlock::__scripts::{Held, ReleaseToken};
use dlock_model::admin::Form;
use dlock_model::mutant::Mutant;
use rand::Rng;

use super::harness::{hold_kind, same, Bench};
use super::kinds::{KindScripts, Run};
use super::library::{send, try_send};

/// A test-local bug in the model's `held`, for the negative control.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// An entry whose lease ended is still held.
    EndedEntryHeld,
}

/// The kinds' keys: the scripts asked by token name the lock's keys and line.
struct TokenScripts {
    kinds: KindScripts,
}

fn token_scripts() -> TokenScripts {
    TokenScripts {
        kinds: KindScripts::new(),
    }
}

/// What the runs reached.
#[derive(Default, Debug)]
struct Reached {
    held: usize,
    released: usize,
    handed: usize,
    refused_kind: usize,
}

fn run_tokens(
    seed: u64,
    scripts: &TokenScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    bug: Option<Bug>,
    reached: &mut Reached,
) -> Result<(), String> {
    let mut run = Run::new(seed, conn, mutants);
    for step in 0..40 {
        let choice = run.rng.random_range(0..12);
        let client = run.rng.random_range(0..3u8);
        let context = format!(
            "seed {seed} ({:?}), step {step}: choice {choice}, client {client}",
            run.kind
        );
        let now = run.now;
        let token = run.latest(client);
        match choice {
            0..=5 => run.kind_step(&scripts.kinds, &context)?,
            6..=8 => {
                // Mostly the hold's own form (see `Run::asked_form`).
                let form = run.asked_form(client, 0.7);
                let held = Held {
                    key: &scripts.kinds.keys().key,
                    kind: hold_kind(form),
                    token: &run.text(token),
                };
                let held: i64 = send(&held, run.conn);
                let mut expected = run.model.held(form, token, now);
                if bug == Some(Bug::EndedEntryHeld) && form == Form::Entry {
                    expected |= run.model.entries.contains_key(&token);
                }
                reached.held += usize::from(expected);
                same(held == 1, expected, &format!("{context}: held {form:?}"))?;
            }
            _ => {
                let release = ReleaseToken {
                    keys: scripts.kinds.keys(),
                    queue: scripts.kinds.queue(),
                    token: &run.text(token),
                };
                let reply: redis::RedisResult<i64> = try_send(&release, run.conn);
                let expected = run.model.release_by_token(token, now, 2, mutants);
                match (&reply, &expected) {
                    (Ok(released), Ok((modelled, handed))) => {
                        same(*released == 1, *modelled, &context)?;
                        reached.released += usize::from(*modelled);
                        reached.handed += usize::from(handed.is_some());
                    }
                    (Err(err), Err(_)) if err.to_string().contains("DLOCKTYPE") => {
                        reached.refused_kind += 1;
                    }
                    _ => {
                        return Err(format!(
                            "{context}: release by token says {reply:?}, the model {expected:?}"
                        ))
                    }
                }
            }
        }
        run.compare(&context)?;
    }
    Ok(())
}

/// Every run of the suite, for the coverage test.
pub fn run_tokens_suite(seed: u64, conn: &mut redis::Connection) {
    let mut reached = Reached::default();
    let _ = run_tokens(seed, &token_scripts(), conn, &[], None, &mut reached);
}

#[test]
fn held_and_release_by_token_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = token_scripts();
    let mut reached = Reached::default();
    bench.conforms(250, |seed, conn| {
        run_tokens(seed, &scripts, conn, &[], None, &mut reached)
    });
    let Reached {
        held,
        released,
        handed,
        refused_kind,
    } = reached;
    for (what, count, least) in [
        ("held answers", held, 200),
        ("releases by token", released, 100),
        ("hand-offs by a release by token", handed, 10),
        ("refusals of a hash at the key", refused_kind, 50),
    ] {
        assert!(count >= least, "only {count} {what} in 250 runs");
    }
    // The negative control: bugs in the model are told apart within the same runs.
    let bugs = [
        (Some(Mutant::ReleaseSkipsHandOff), None),
        (Some(Mutant::HandOffWithoutOwnerCheck), None),
        (None, Some(Bug::EndedEntryHeld)),
    ];
    let mut ignored = Reached::default();
    bench.tells_apart(&bugs, 250, |seed, conn, (mutant, bug)| {
        let mutants: Vec<Mutant> = mutant.into_iter().collect();
        run_tokens(seed, &scripts, conn, &mutants, bug, &mut ignored)
    });
}

//! The semaphore's scripts (acquire, waiting or single, and its resend; release with its
//! hand-off of a permit to the first in line; leaving the line; renewal) beside the model,
//! the live permits, the counter and the live waiters in line compared after every step.

use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{
    entries_at, leave_line, line_at, renew_script, same, token_text, Bench, Fences, SHIFT_ENTRIES,
    SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL, WAITER_LEASE,
};
use super::library::LibraryScript;

pub const PERMITS: &str = "s";
pub const PERMITS_INDEX: &str = "s:index";
pub const PERMITS_FENCE: &str = "s:fence";
pub const PERMITS_QUEUE: &str = "s:queue";
pub const PERMITS_LEASES: &str = "s:queue-leases";

pub struct SemaphoreScripts {
    pub acquire: LibraryScript,
    pub release: LibraryScript,
    pub cancel: LibraryScript,
    pub renew: LibraryScript,
    pub shift: redis::Script,
    pub shift_queue: redis::Script,
}

/// A semaphore waiter's token as the library writes it (`QueueKeys::waiter_token`): what a
/// direct grant gives it, its ttl in ms and its N, follows its token.
pub fn permit_text(token: Token) -> String {
    format!("{}~{}~2", token_text(token), u64::from(TTL) * TICK_MS)
}

/// What the semaphore's runs reached.
#[derive(Default)]
pub struct SemaphoreReached {
    /// Releases that handed a permit to the first in line.
    pub hand_offs: usize,
    /// A waiter's next attempt (its token in line) granted.
    pub from_line: usize,
}

/// One random run of the semaphore of 2: three clients acquire (a wait, which takes a
/// place in line, or a single attempt that does not), try again with their token, resend
/// the last attempt, release (a hand-off of the freed permit to the first in line), leave
/// the line, renew; the clock ticks. The live permits, the counter and the live waiters in
/// line (in order) are compared after every step.
pub fn run_semaphore(
    seed: u64,
    scripts: &SemaphoreScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut SemaphoreReached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Server::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 3];
    let mut last: Option<(Token, bool)> = None;
    let mut fences = Fences::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let latest = Token {
            client,
            attempt: attempts[client as usize].saturating_sub(1),
        };
        let choice = rng.random_range(0..12);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A new wait's first attempt, a single attempt, a resend of the last attempt
            // (as after a lost reply), or a waiter's next attempt with its token.
            0..=5 => {
                let (token, join) = match choice {
                    0..=2 => {
                        let token = Token {
                            client,
                            attempt: attempts[client as usize],
                        };
                        attempts[client as usize] += 1;
                        (token, choice != 2)
                    }
                    3 => match last {
                        Some(last) => last,
                        None => continue,
                    },
                    _ => (latest, true),
                };
                last = Some((token, join));
                let in_line = model.live_waiters(now).any(|t| t == token);
                let expected =
                    model.permit_acquire(token, now, TTL, 2, WAITER_LEASE, join, mutants);
                let reply: Vec<i64> = scripts
                    .acquire
                    .key(PERMITS)
                    .key(PERMITS_FENCE)
                    .key(PERMITS_QUEUE)
                    .key(PERMITS_LEASES)
                    .key(PERMITS_INDEX)
                    .arg(permit_text(token))
                    .arg(lease_ms)
                    .arg(2)
                    .arg(u64::from(WAITER_LEASE) * TICK_MS)
                    .arg("s:wake:")
                    .arg(if join { "1" } else { "0" })
                    .invoke(conn)
                    .unwrap();
                match (reply.as_slice(), expected) {
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        reached.from_line += usize::from(in_line);
                        fences.check(*fence as u64, modelled, &context)?
                    }
                    ([0, ..], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            6 | 7 => {
                let (expected, handed) = model.permit_release(latest, now, TTL, 2, mutants);
                let released: i64 = scripts
                    .release
                    .key(PERMITS)
                    .key(PERMITS_QUEUE)
                    .key(PERMITS_LEASES)
                    .key(PERMITS_INDEX)
                    .key(PERMITS_FENCE)
                    .arg(permit_text(latest))
                    .arg("s:wake:")
                    .arg(2)
                    .invoke(conn)
                    .unwrap();
                same(released == 1, expected, &context)?;
                if let Some((_, fence)) = handed {
                    reached.hand_offs += 1;
                    // The hand-off's fence is the counter now (compared in order).
                    let counter: u64 = redis::cmd("GET").arg(PERMITS_FENCE).query(conn).unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            8 => {
                let line = (PERMITS_QUEUE, PERMITS_LEASES, "s:wake:");
                let text = permit_text(latest);
                leave_line(conn, &scripts.cancel, line, &text, &mut model, latest, now)
                    .map_err(|e| format!("{context}: {e}"))?;
            }
            9 => {
                let expected = model.renew_entry(latest, now, TTL);
                let renewed: Vec<i64> = scripts
                    .renew
                    .key(PERMITS)
                    .key(PERMITS_INDEX)
                    .arg("e")
                    .arg(permit_text(latest))
                    .arg(lease_ms)
                    .invoke(conn)
                    .unwrap();
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                let _: () = scripts
                    .shift
                    .key(PERMITS)
                    .key(PERMITS_INDEX)
                    .arg(TICK_MS)
                    .invoke(conn)
                    .unwrap();
                let _: () = scripts
                    .shift_queue
                    .key(PERMITS_QUEUE)
                    .key(PERMITS_LEASES)
                    .arg(TICK_MS)
                    .arg(SLACK_MS)
                    .invoke(conn)
                    .unwrap();
            }
        }
        let mut modelled: Vec<String> = model.live_entries(now).map(permit_text).collect();
        modelled.sort();
        same(
            entries_at(conn, PERMITS).0,
            modelled,
            &format!("{context}: live permits"),
        )?;
        fences.check_counter(conn, PERMITS_FENCE, model.counter, &context)?;
        same(
            line_at(conn, PERMITS_QUEUE, PERMITS_LEASES),
            model.live_waiters(now).map(permit_text).collect::<Vec<_>>(),
            &format!("{context}: the line"),
        )?;
    }
    Ok(())
}

pub fn semaphore_scripts() -> SemaphoreScripts {
    SemaphoreScripts {
        acquire: LibraryScript::named("semaphore acquire"),
        release: LibraryScript::named("semaphore release"),
        cancel: LibraryScript::named("queue leave"),
        renew: renew_script(),
        shift: redis::Script::new(SHIFT_ENTRIES),
        shift_queue: redis::Script::new(SHIFT_QUEUE),
    }
}

#[test]
fn the_semaphore_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = semaphore_scripts();
    let mut reached = SemaphoreReached::default();
    bench.conforms(200, |seed, conn| {
        run_semaphore(seed, &scripts, conn, &[], &mut reached)
    });
    // The runs reach what they are for: releases that hand a permit on, and waiters
    // granted by their next attempt.
    let SemaphoreReached {
        hand_offs,
        from_line,
    } = reached;
    // (122 hand-offs and 44 grants from the line in these runs.)
    assert!(hand_offs >= 100, "only {hand_offs} hand-offs in 200 runs");
    assert!(
        from_line >= 30,
        "only {from_line} grants from the line in 200 runs"
    );
    // The negative control: bugs in the model's semaphore are told apart.
    let mutants = [
        Mutant::PermitCountOffByOne,
        Mutant::PurgeForgetsLiveReader,
        Mutant::ResendKeepsOldLease,
        Mutant::QueueSkipsHead,
        Mutant::QueueKeepsLapsedWaiters,
    ];
    bench.tells_apart(&mutants, 200, |seed, conn, mutant| {
        let reached = &mut SemaphoreReached::default();
        run_semaphore(seed, &scripts, conn, &[mutant], reached)
    });
}

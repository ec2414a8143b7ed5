//! The fair mutex's scripts (acquire, waiting or single, and its next attempt; release with
//! its hand-off to the first in line; leaving the line; renewal) beside the model, the
//! holder, the counter and the live waiters in line (in order) compared after every step.

use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{
    line_at, renew_script, same, waiter_text, Bench, Fences, SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL,
    WAITER_LEASE,
};
use super::library::LibraryScript;

pub const FAIR: &str = "f";
pub const FAIR_FENCE: &str = "f:fence";
pub const FAIR_QUEUE: &str = "f:queue";
pub const FAIR_LEASES: &str = "f:queue-leases";

pub struct FairScripts {
    pub acquire: LibraryScript,
    pub release: LibraryScript,
    pub cancel: LibraryScript,
    pub renew: LibraryScript,
    pub shift: redis::Script,
}

pub fn fair_scripts() -> FairScripts {
    FairScripts {
        acquire: LibraryScript::named("fair mutex acquire"),
        release: LibraryScript::named("fair mutex release"),
        cancel: LibraryScript::named("queue leave"),
        renew: renew_script(),
        shift: redis::Script::new(SHIFT_QUEUE),
    }
}

/// The waiters in line whose waiter lease has not ended (by the server's clock), in
/// arrival order.
pub fn live_waiters(conn: &mut redis::Connection) -> Vec<String> {
    line_at(conn, FAIR_QUEUE, FAIR_LEASES)
}

/// One random run of the fair mutex: three clients acquire (waiting, which takes a place
/// in line, or a single attempt that does not), try again with their token, release (a
/// hand-off to the first in line), leave the line, renew; the clock ticks. Returns how
/// many releases handed the lock to a waiter.
pub fn run_fair(
    seed: u64,
    scripts: &FairScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
) -> Result<usize, String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Server::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 3];
    let mut fences = Fences::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    let mut hand_offs = 0;
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let latest = Token {
            client,
            attempt: attempts[client as usize].saturating_sub(1),
        };
        let choice = rng.random_range(0..11);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A new wait's first attempt, its next attempt, or a single attempt.
            0..=4 => {
                let token = if choice <= 1 {
                    let token = Token {
                        client,
                        attempt: attempts[client as usize],
                    };
                    attempts[client as usize] += 1;
                    token
                } else {
                    latest
                };
                let join = choice != 4;
                let expected = model.fair_acquire(token, now, TTL, WAITER_LEASE, join, mutants);
                let reply: Vec<i64> = scripts
                    .acquire
                    .key(FAIR)
                    .key(FAIR_FENCE)
                    .key(FAIR_QUEUE)
                    .key(FAIR_LEASES)
                    .arg(waiter_text(token))
                    .arg(lease_ms)
                    .arg(u64::from(WAITER_LEASE) * TICK_MS)
                    .arg("f:wake:")
                    .arg(if join { "1" } else { "0" })
                    .invoke(conn)
                    .unwrap();
                match (reply.as_slice(), expected) {
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        fences.check(*fence as u64, modelled, &context)?
                    }
                    ([0, ..], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            5 | 6 => {
                let (expected, handed) = model.fair_release(latest, now, TTL, mutants);
                let released: i64 = scripts
                    .release
                    .key(FAIR)
                    .key(FAIR_QUEUE)
                    .key(FAIR_LEASES)
                    .key(FAIR_FENCE)
                    .arg(waiter_text(latest))
                    .arg("f:wake:")
                    .invoke(conn)
                    .unwrap();
                same(released == 1, expected, &context)?;
                if let Some((_, fence)) = handed {
                    hand_offs += 1;
                    // The hand-off's fence is the counter now (compared below, in order).
                    let counter: u64 = redis::cmd("GET").arg(FAIR_FENCE).query(conn).unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            7 => {
                let expected = model.queue_cancel(latest);
                let left: i64 = scripts
                    .cancel
                    .key(FAIR_QUEUE)
                    .key(FAIR_LEASES)
                    .arg(waiter_text(latest))
                    .arg("f:wake:")
                    .invoke(conn)
                    .unwrap();
                same(left == 1, expected, &context)?;
            }
            8 => {
                let expected = model.renew_string(latest, now, TTL);
                let renewed: Vec<i64> = scripts
                    .renew
                    .key(FAIR)
                    .arg("s")
                    .arg(waiter_text(latest))
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
                    .key(FAIR)
                    .key(FAIR_LEASES)
                    .key(FAIR_QUEUE)
                    .arg(TICK_MS)
                    .arg(SLACK_MS)
                    .invoke(conn)
                    .unwrap();
            }
        }
        let holder: Option<String> = redis::cmd("GET").arg(FAIR).query(conn).unwrap();
        same(
            holder,
            model.holder(now).map(waiter_text),
            &format!("{context}: holder"),
        )?;
        fences.check_counter(conn, FAIR_FENCE, model.counter, &context)?;
        same(
            live_waiters(conn),
            model.live_waiters(now).map(waiter_text).collect::<Vec<_>>(),
            &format!("{context}: the line"),
        )?;
    }
    Ok(hand_offs)
}

#[test]
fn the_fair_mutex_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = fair_scripts();
    let handed = bench.conforms(200, |seed, conn| run_fair(seed, &scripts, conn, &[]));
    let hand_offs: usize = handed.into_iter().sum();
    // The runs reach what they are for: releases that hand the lock on.
    assert!(hand_offs >= 100, "only {hand_offs} hand-offs in 200 runs");
    // The negative control: bugs in the model's fair mutex are told apart.
    let mutants = [
        Mutant::HandOffWithoutOwnerCheck,
        Mutant::ReleaseSkipsHandOff,
        Mutant::HandOffReusesFence,
        Mutant::QueueKeepsLapsedWaiters,
        Mutant::GrantIgnoresQueue,
        Mutant::ResendKeepsOldLease,
    ];
    bench.tells_apart(&mutants, 200, |seed, conn, mutant| {
        run_fair(seed, &scripts, conn, &[mutant])
    });
}

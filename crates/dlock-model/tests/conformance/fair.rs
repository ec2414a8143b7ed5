//! The fair mutex's scripts (acquire, waiting or single, and its next attempt; release with
//! its hand-off to the first in line; leaving the line; renewal) beside the model, the
//! holder, the counter and the live waiters in line (in order) compared after every step.

use dlock::__scripts::{FairAcquire, FairRelease, HoldKind, LeaveQueue, LockKeys, QueueKeys};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{
    line_at, renew, same, waiter_text, Bench, Fences, SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL,
    WAITER_LEASE,
};
use super::library::{lock_keys, send};

/// The fair mutex's keys and line as the library names them (every call is composed from
/// them), and the test's own tick.
pub struct FairScripts {
    pub keys: LockKeys,
    pub queue: QueueKeys,
    pub shift: redis::Script,
}

pub fn fair_scripts() -> FairScripts {
    fair_scripts_for("f")
}

/// The keys of the fair mutex `name`.
pub fn fair_scripts_for(name: &str) -> FairScripts {
    let keys = lock_keys(name);
    let queue = QueueKeys::new(&keys);
    FairScripts {
        keys,
        queue,
        shift: redis::Script::new(SHIFT_QUEUE),
    }
}

/// The waiters in line whose waiter lease has not ended (by the server's clock), in
/// arrival order.
pub fn live_waiters(scripts: &FairScripts, conn: &mut redis::Connection) -> Vec<String> {
    line_at(conn, &scripts.queue.queue, &scripts.queue.leases)
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
                let acquire = FairAcquire {
                    keys: &scripts.keys,
                    queue: &scripts.queue,
                    token: &waiter_text(token),
                    lease_ms,
                    waiter_lease_ms: u64::from(WAITER_LEASE) * TICK_MS,
                    join_queue: join,
                };
                let reply: Vec<i64> = send(&acquire, conn);
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
                let release = FairRelease {
                    keys: &scripts.keys,
                    queue: &scripts.queue,
                    token: &waiter_text(latest),
                };
                let released: i64 = send(&release, conn);
                same(released == 1, expected, &context)?;
                if let Some((_, fence)) = handed {
                    hand_offs += 1;
                    // The hand-off's fence is the counter now (compared below, in order).
                    let counter: u64 = redis::cmd("GET")
                        .arg(&scripts.keys.fence)
                        .query(conn)
                        .unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            7 => {
                let expected = model.queue_cancel(latest);
                let leave = LeaveQueue {
                    queue: &scripts.queue,
                    token: &waiter_text(latest),
                };
                let left: i64 = send(&leave, conn);
                same(left == 1, expected, &context)?;
            }
            8 => {
                let expected = model.renew_string(latest, now, TTL);
                let renewed = renew(
                    &scripts.keys.key,
                    HoldKind::String,
                    &waiter_text(latest),
                    lease_ms,
                    conn,
                );
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                let _: () = scripts
                    .shift
                    .key(&scripts.keys.key)
                    .key(&scripts.queue.leases)
                    .key(&scripts.queue.queue)
                    .arg(TICK_MS)
                    .arg(SLACK_MS)
                    .invoke(conn)
                    .unwrap();
            }
        }
        let holder: Option<String> = redis::cmd("GET")
            .arg(&scripts.keys.key)
            .query(conn)
            .unwrap();
        same(
            holder,
            model.holder(now).map(waiter_text),
            &format!("{context}: holder"),
        )?;
        fences.check_counter(conn, &scripts.keys.fence, model.counter, &context)?;
        same(
            live_waiters(scripts, conn),
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

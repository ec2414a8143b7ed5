//! One Redlock master's scripts (acquire with the fence drawn at grant and its origin
//! told, raise, release, restart empty) beside `redlock`'s `Master`.

use dlock::__scripts::{MutexAcquire, RaiseFence};
use dlock_model::redlock::Master;
use dlock_model::scripts::Token;
use rand::{Rng, SeedableRng};

use super::harness::{same, tick_keys, token_text, Bench, Fences, TICK_MS, TTL};
use super::library::send;
use super::mutex::{self, scripts_for, Scripts};

/// A master's keys: the mutex's, under the name `k`.
pub fn master_scripts() -> Scripts {
    scripts_for("k")
}

/// A test-local bug in the model's master, for the Redlock run's negative control.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MasterBug {
    /// A raise sets the counter to the fence, lower or not.
    RaiseLowers,
    /// A raise does not check that the hold is the round's.
    RaiseWithoutOwnerCheck,
}

/// `Master::raise`, or the bug in its place.
pub fn raise_in_model(
    master: &mut Master,
    bug: Option<MasterBug>,
    token: Token,
    fence: u64,
    now: u8,
) -> bool {
    match bug {
        None => master.raise(token, fence, now),
        Some(MasterBug::RaiseLowers) if master.holder(now) == Some(token) => {
            master.counter = fence;
            true
        }
        Some(MasterBug::RaiseLowers) => false,
        Some(MasterBug::RaiseWithoutOwnerCheck) => {
            master.counter = master.counter.max(fence);
            true
        }
    }
}

/// How far a raise may put a counter ahead of the clocks: far more than the server's clock
/// (µs) and the model's (`MODEL_CLOCK_STEP` a step) move in a run.
pub const AHEAD: u64 = 1_000_000_000;
/// The model's clock moves this much each step: more than a raise "just above" adds, as
/// the server's clock moves more than that (µs) between two steps' scripts.
pub const MODEL_CLOCK_STEP: u64 = 1_000;

/// What one Redlock run reached.
#[derive(Default, Debug)]
pub struct RedlockReached {
    pub clock_fences: usize,
    pub counter_fences: usize,
    pub raised: usize,
    pub refused_not_held: usize,
    pub not_lowered: usize,
    pub restarts: usize,
}

/// One random run of one Redlock master: clients acquire with a fresh token each (as
/// Redlock's rounds do, with the fence drawn at grant and its origin told: ARGV[3] and
/// ARGV[4] '1', as redlock/mutex.rs's `acquire_on` sends them), raise the counter
/// (redlock/raise.lua) to a fence a settlement could choose — another master's larger
/// fence, just above this counter or far ahead of the clocks, or a stale one at or below
/// it (which must not lower it) — with their latest token (which may no longer hold:
/// refused), release, the clock ticks, and the master restarts empty (FLUSHALL). After
/// every step the replies (with whether the fence is the clock), the holder and the
/// counter must agree with the model's `Master`.
///
/// The clocks differ: the server's is `TIME` in µs, the model's moves `MODEL_CLOCK_STEP` a
/// step. Both only grow, by more between two steps than a raise "just above" adds, and a
/// raise "ahead" puts a counter beyond where either clock gets in the run; so the counter
/// and the clock decide each draw alike on both sides, and fences compare exactly in
/// order and equality (`Fences`), the clock flag as it is.
pub fn run_redlock_master(
    seed: u64,
    scripts: &Scripts,
    conn: &mut redis::Connection,
    bug: Option<MasterBug>,
    reached: &mut RedlockReached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Master::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 2];
    let mut fences = Fences::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    for step in 0..40u64 {
        let client = rng.random_range(0..2u8);
        let latest = Token {
            client,
            attempt: attempts[client as usize].saturating_sub(1),
        };
        let choice = rng.random_range(0..16);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            0..=3 => {
                let token = Token {
                    client,
                    attempt: attempts[client as usize],
                };
                attempts[client as usize] += 1;
                let clock = 1_000_000 + step * MODEL_CLOCK_STEP;
                let expected = model.acquire(token, now, TTL, Some(clock));
                let acquire = MutexAcquire {
                    keys: &scripts.keys,
                    token: &token_text(token),
                    lease_ms,
                    eager: true,
                    tell_clock: true,
                };
                let reply: Vec<i64> = send(&acquire, conn);
                match (reply.as_slice(), expected) {
                    ([1, fence, from_clock], Some((modelled, modelled_clock))) => {
                        same(
                            *from_clock == 1,
                            modelled_clock,
                            &format!("{context}: clock"),
                        )?;
                        fences.check(*fence as u64, modelled, &context)?;
                        if modelled_clock {
                            reached.clock_fences += 1;
                        } else {
                            reached.counter_fences += 1;
                        }
                    }
                    ([0, _], None) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            4..=8 => {
                // The fence, from each side's own counter alike.
                let kind = rng.random_range(0..6);
                let target = |counter: u64| match kind {
                    0 => counter.saturating_sub(1),
                    1 => counter,
                    2 => counter + 2,
                    _ => counter + AHEAD,
                };
                let counter: Option<u64> = redis::cmd("GET")
                    .arg(&scripts.keys.fence)
                    .query(conn)
                    .unwrap();
                let (fence, modelled_fence) = (target(counter.unwrap_or(0)), target(model.counter));
                // Mostly the holder's round (whichever client holds), else the client's
                // latest, which may hold nothing here any more.
                let token = match model.holder(now) {
                    Some(holder) if rng.random_bool(0.7) => holder,
                    _ => latest,
                };
                let held = model.holder(now) == Some(token);
                let before = model.counter;
                let expected = raise_in_model(&mut model, bug, token, modelled_fence, now);
                let raise = RaiseFence {
                    keys: &scripts.keys,
                    token: &token_text(token),
                    fence,
                };
                let raised: i64 = send(&raise, conn);
                same(raised, i64::from(expected), &context)?;
                match (held, kind) {
                    (false, _) => reached.refused_not_held += 1,
                    (true, 0) if before > 0 => reached.not_lowered += 1,
                    (true, 2 | 3) => reached.raised += 1,
                    _ => {}
                }
            }
            9 | 10 => {
                let expected = model.release(latest, now);
                let released = mutex::release(&scripts.keys, latest, conn);
                same(released == 1, expected, &context)?;
            }
            // Rarely: a restart ends what the counter reached.
            11 if rng.random_bool(0.25) => {
                let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
                model = Master::restarted(0);
                reached.restarts += 1;
            }
            _ => {
                now += 1;
                tick_keys(conn, &[&scripts.keys.key]);
            }
        }
        let holder: Option<String> = redis::cmd("GET")
            .arg(&scripts.keys.key)
            .query(conn)
            .unwrap();
        same(
            holder,
            model.holder(now).map(token_text),
            &format!("{context}: holder"),
        )?;
        fences.check_counter(conn, &scripts.keys.fence, model.counter, &context)?;
    }
    Ok(())
}

#[test]
fn a_redlock_master_does_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = master_scripts();
    let mut reached = RedlockReached::default();
    bench.conforms(200, |seed, conn| {
        run_redlock_master(seed, &scripts, conn, None, &mut reached)
    });
    // The runs reach what they are for: fences from the clock and from the counter, raises
    // that raise, refused for a hold that is not the round's, stale ones that must not
    // lower, and restarts.
    let RedlockReached {
        clock_fences,
        counter_fences,
        raised,
        refused_not_held,
        not_lowered,
        restarts,
    } = &reached;
    for (what, count) in [
        ("clock fences", clock_fences),
        ("counter fences", counter_fences),
        ("raises", raised),
        ("raises refused (not held)", refused_not_held),
        ("stale raises (not lowered)", not_lowered),
        ("restarts", restarts),
    ] {
        assert!(
            *count >= 100,
            "only {count} {what} in 200 runs: {reached:?}"
        );
    }
    // The negative control: a master with a bug in its raise is told apart.
    let bugs = [MasterBug::RaiseLowers, MasterBug::RaiseWithoutOwnerCheck];
    let mut ignored = RedlockReached::default();
    bench.tells_apart(&bugs, 200, |seed, conn, bug| {
        run_redlock_master(seed, &scripts, conn, Some(bug), &mut ignored)
    });
}

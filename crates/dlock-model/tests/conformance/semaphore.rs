//! The semaphore's scripts (acquire, waiting or single, and its resend; release with its
//! hand-off of a permit to the first in line; leaving the line; renewal) beside the model,
//! the live permits, the counter and the live waiters in line compared after every step.

use dlock::__scripts::{
    permit_queue, HoldKind, LockKeys, QueueKeys, SemaphoreAcquire, SemaphoreRelease,
};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{
    entries_at, lease, leave_line, line_at, renew, same, token_text, Attempts, Bench, Fences,
    SHIFT_ENTRIES, SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL, WAITER_LEASE,
};
use super::library::{lock_keys, named_key, send};

/// The semaphore's keys and line as the library names them (every call is composed from
/// them), and the test's own ticks.
pub struct SemaphoreScripts {
    pub keys: LockKeys,
    /// The line of the semaphore of 2 (its N is what its waiters' tokens name; the keys
    /// are any N's).
    pub queue: QueueKeys,
    /// The permits' expiry index (`expiry`).
    pub index: String,
    pub shift: redis::Script,
    pub shift_queue: redis::Script,
}

impl SemaphoreScripts {
    /// The acquire of the permit written `token` in a semaphore of `permits`.
    pub fn acquire(
        &self,
        token: &str,
        permits: usize,
        join_queue: bool,
        conn: &mut redis::Connection,
    ) -> Vec<i64> {
        let acquire = SemaphoreAcquire {
            keys: &self.keys,
            queue: &self.queue,
            token,
            lease_ms: u64::from(TTL) * TICK_MS,
            permits: permits as u32,
            waiter_lease_ms: u64::from(WAITER_LEASE) * TICK_MS,
            join_queue,
        };
        send(&acquire, conn)
    }

    /// The release of the permit written `token` in a semaphore of `permits`.
    pub fn release(&self, token: &str, permits: usize, conn: &mut redis::Connection) -> i64 {
        let release = SemaphoreRelease {
            keys: &self.keys,
            queue: &self.queue,
            token,
            permits: permits as u32,
        };
        send(&release, conn)
    }

    /// The renewal of the permit written `token`.
    pub fn renew(&self, token: &str, conn: &mut redis::Connection) -> Vec<i64> {
        let lease_ms = u64::from(TTL) * TICK_MS;
        renew(&self.keys.key, HoldKind::Entry, token, lease_ms, conn)
    }

    /// A tick on the server: the permits' ends and the waiters' leases a tick earlier.
    pub fn tick(&self, conn: &mut redis::Connection) {
        let _: () = self
            .shift
            .key(&self.keys.key)
            .key(&self.index)
            .arg(TICK_MS)
            .invoke(conn)
            .unwrap();
        let _: () = self
            .shift_queue
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .arg(TICK_MS)
            .arg(SLACK_MS)
            .invoke(conn)
            .unwrap();
    }
}

/// A semaphore waiter's token as the library writes it (`QueueKeys::waiter_token`): what a
/// direct grant gives it, its ttl in ms and its N, follows its token.
pub fn permit_text(token: Token) -> String {
    permit_queue(&lock_keys("s"), 2).waiter_token(token_text(token), lease())
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
    let mut attempts = Attempts::default();
    let mut fences = Fences::default();
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let latest = attempts.latest(client);
        let choice = rng.random_range(0..12);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A new wait's first attempt, a single attempt, a resend of the last attempt
            // (as after a lost reply), or a waiter's next attempt with its token.
            0..=5 => {
                let Some((token, join)) = attempts.pick(choice, client) else {
                    continue;
                };
                let in_line = model.live_waiters(now).any(|t| t == token);
                let expected =
                    model.permit_acquire(token, now, TTL, 2, WAITER_LEASE, join, mutants);
                let reply = scripts.acquire(&permit_text(token), 2, join, conn);
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
                let released = scripts.release(&permit_text(latest), 2, conn);
                same(released == 1, expected, &context)?;
                if let Some((_, fence)) = handed {
                    reached.hand_offs += 1;
                    // The hand-off's fence is the counter now (compared in order).
                    let counter: u64 = redis::cmd("GET")
                        .arg(&scripts.keys.fence)
                        .query(conn)
                        .unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            8 => {
                let text = permit_text(latest);
                leave_line(conn, &scripts.queue, &text, &mut model, latest, now)
                    .map_err(|e| format!("{context}: {e}"))?;
            }
            9 => {
                let expected = model.renew_entry(latest, now, TTL);
                let renewed = scripts.renew(&permit_text(latest), conn);
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                scripts.tick(conn);
            }
        }
        let mut modelled: Vec<String> = model.live_entries(now).map(permit_text).collect();
        modelled.sort();
        same(
            entries_at(conn, &scripts.keys.key).0,
            modelled,
            &format!("{context}: live permits"),
        )?;
        fences.check_counter(conn, &scripts.keys.fence, model.counter, &context)?;
        same(
            line_at(conn, &scripts.queue.queue, &scripts.queue.leases),
            model.live_waiters(now).map(permit_text).collect::<Vec<_>>(),
            &format!("{context}: the line"),
        )?;
    }
    Ok(())
}

pub fn semaphore_scripts() -> SemaphoreScripts {
    semaphore_scripts_for("s")
}

/// The keys of the semaphore (of 2) `name`.
pub fn semaphore_scripts_for(name: &str) -> SemaphoreScripts {
    let keys = lock_keys(name);
    SemaphoreScripts {
        queue: permit_queue(&keys, 2),
        index: named_key(&keys, "expiry"),
        keys,
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

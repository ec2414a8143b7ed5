//! Weighted permits (`Semaphore::lock_many`): the semaphore's real scripts with tokens
//! that take 2 permits (`~w2`) and 1, on a real server, beside the model's
//! `weighted_permit_acquire` / `weighted_permit_release`; after every step the replies, the
//! live permits, the counter, the line and the hash's `~extra` (the weight beyond one per
//! permit, permits.lua) must agree.

use dlock::__scripts::permit_queue;
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{
    entries_at, lease, leave_line, line_at, same, token_text, Attempts, Bench, Fences, TTL,
    WAITER_LEASE,
};
use super::library::lock_keys;
use super::semaphore::{semaphore_scripts, SemaphoreScripts};

/// N of the runs' semaphore.
const N: usize = 3;
/// Each client's weight: two that never fit together, and one that fits beside either.
const WEIGHTS: [usize; 3] = [2, 2, 1];

fn weight_of(token: Token) -> usize {
    WEIGHTS[usize::from(token.client)]
}

/// A weighted waiter's token as the library writes it (`QueueKeys::waiter_token`): its
/// ttl in ms, its N, and `~w<k>` when it takes k > 1.
fn weighted_text(token: Token) -> String {
    let mut line = permit_queue(&lock_keys("s"), N as u32);
    line.weight = weight_of(token) as u32;
    line.waiter_token(token_text(token), lease())
}

/// What the weighted runs reached.
#[derive(Default)]
pub struct WeightedReached {
    /// Releases that handed permits to the first in line.
    pub hand_offs: usize,
    /// Attempts answered busy while the attempt's own weight was free: someone ahead of it
    /// in line did not fit (strict order).
    pub held_back: usize,
    /// Steps after which two permits were held with 3 of 3 permits taken.
    pub full: usize,
}

/// `~extra` as the model's permits make it: the weight beyond one of every permit the hash
/// keeps (ended ones too, until a script purges them); none when it is 0.
fn modelled_extra(model: &Server) -> Option<String> {
    let extra: usize = model.entries.keys().map(|&t| weight_of(t) - 1).sum();
    (extra > 0).then(|| extra.to_string())
}

/// One random run of a semaphore of 3 whose clients take 2, 2 and 1: acquire (waiting or
/// single), try again with the waiter's token, resend, release (with the hand-off), leave
/// the line, renew; the clock ticks.
pub fn run_weighted(
    seed: u64,
    scripts: &SemaphoreScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut WeightedReached,
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
            0..=5 => {
                let Some((token, join)) = attempts.pick(choice, client) else {
                    continue;
                };
                let free = N.saturating_sub(model.weight_held(now, &weight_of, &[]));
                let expected = model.weighted_permit_acquire(
                    token,
                    now,
                    TTL,
                    N,
                    WAITER_LEASE,
                    join,
                    &weight_of,
                    mutants,
                );
                let reply = scripts.acquire(&weighted_text(token), N, join, conn);
                match (reply.as_slice(), expected) {
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        fences.check(*fence as u64, modelled, &context)?
                    }
                    ([0, ..], Grant::Busy) => {
                        reached.held_back += usize::from(weight_of(token) <= free);
                    }
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            6 | 7 => {
                let (expected, handed) =
                    model.weighted_permit_release(latest, now, TTL, N, &weight_of, mutants);
                let released = scripts.release(&weighted_text(latest), N, conn);
                same(released == 1, expected, &context)?;
                if let Some((_, fence)) = handed {
                    reached.hand_offs += 1;
                    let counter: u64 = redis::cmd("GET")
                        .arg(&scripts.keys.fence)
                        .query(conn)
                        .unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                }
            }
            8 => {
                let text = weighted_text(latest);
                leave_line(conn, &scripts.queue, &text, &mut model, latest, now)
                    .map_err(|e| format!("{context}: {e}"))?;
            }
            9 => {
                let expected = model.renew_entry(latest, now, TTL);
                let renewed = scripts.renew(&weighted_text(latest), conn);
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                scripts.tick(conn);
            }
        }
        let mut modelled: Vec<String> = model.live_entries(now).map(weighted_text).collect();
        modelled.sort();
        let (live, _) = entries_at(conn, &scripts.keys.key);
        reached.full +=
            usize::from(live.len() == 2 && model.weight_held(now, &weight_of, &[]) == N);
        same(live, modelled, &format!("{context}: live permits"))?;
        let extra: Option<String> = redis::cmd("HGET")
            .arg(&scripts.keys.key)
            .arg("~extra")
            .query(conn)
            .unwrap();
        same(extra, modelled_extra(&model), &format!("{context}: ~extra"))?;
        fences.check_counter(conn, &scripts.keys.fence, model.counter, &context)?;
        same(
            line_at(conn, &scripts.queue.queue, &scripts.queue.leases),
            model
                .live_waiters(now)
                .map(weighted_text)
                .collect::<Vec<_>>(),
            &format!("{context}: the line"),
        )?;
    }
    Ok(())
}

#[test]
fn the_weighted_semaphore_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = semaphore_scripts();
    let mut reached = WeightedReached::default();
    bench.conforms(200, |seed, conn| {
        run_weighted(seed, &scripts, conn, &[], &mut reached)
    });
    let WeightedReached {
        hand_offs,
        held_back,
        full,
    } = reached;
    eprintln!("weighted: {hand_offs} hand-offs, {held_back} held back by the line, {full} full");
    // (78 hand-offs, 609 attempts held back by the line, 2218 full steps in these runs.)
    assert!(hand_offs >= 60, "only {hand_offs} hand-offs in 200 runs");
    assert!(
        held_back >= 300,
        "only {held_back} attempts held back by the line"
    );
    assert!(full >= 1000, "only {full} steps with 2 + 1 of 3 held");
    // The negative controls: the model's weighted bugs are told apart from the scripts
    // (179 and 146 of 200 runs).
    let mutants = [
        Mutant::PermitsCountedNotWeighed,
        Mutant::WeightedGrantPassesTheLine,
    ];
    bench.tells_apart_often(&mutants, 200, 20, |seed, conn, mutant| {
        let reached = &mut WeightedReached::default();
        run_weighted(seed, &scripts, conn, &[mutant], reached)
    });
}

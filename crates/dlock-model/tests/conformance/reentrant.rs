//! The reentrant mutex's scripts (acquire, new or resent; release of one hold; renewal)
//! beside the model, its hash's owner, count and holds compared after every step.

use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use dlock::__scripts::{HoldKind, LockKeys, ReentrantAcquire, ReentrantRelease};

use super::harness::{renew, same, tick_keys, token_text, Bench, Fences, TICK_MS, TTL};
use super::library::{lock_keys, send};

/// The owner of each client's holds: clients 0 and 1 are one owner's nested holds.
pub const OWNERS: [u8; 3] = [0, 0, 1];

/// The reentrant mutex's keys as the library names them: every call is composed from them.
pub struct ReentrantScripts {
    pub keys: LockKeys,
}

pub fn reentrant_scripts() -> ReentrantScripts {
    reentrant_scripts_for("r")
}

/// The keys of the reentrant mutex `name`.
pub fn reentrant_scripts_for(name: &str) -> ReentrantScripts {
    ReentrantScripts {
        keys: lock_keys(name),
    }
}

/// One random run of the reentrant mutex: two owners (one with two clients, its nested
/// holds) acquire and resend, give back holds, renew; the clock ticks. Returns how many
/// acquires re-entered a held lock (a new hold token of the owner, not a resend).
pub fn run_reentrant(
    seed: u64,
    scripts: &ReentrantScripts,
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
    let mut nested = 0;
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let owner = OWNERS[client as usize];
        let owner_text = format!("o{owner}");
        let latest = Token {
            client,
            attempt: attempts[client as usize].saturating_sub(1),
        };
        let choice = rng.random_range(0..9);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A new hold, or a resend of the latest.
            0..=3 => {
                let token = if choice <= 2 {
                    let token = Token {
                        client,
                        attempt: attempts[client as usize],
                    };
                    attempts[client as usize] += 1;
                    token
                } else {
                    latest
                };
                // A real re-entry: another hold token of the owner that holds (not the
                // holder resending its own).
                let reentry = model
                    .reentrant_at(now)
                    .is_some_and(|r| r.owner == owner && !r.holds.contains(&token));
                let expected = model.reentrant_acquire(owner, token, now, TTL, mutants);
                let acquire = ReentrantAcquire {
                    keys: &scripts.keys,
                    owner: &owner_text,
                    lease_ms,
                    token: &token_text(token),
                };
                let reply: Vec<i64> = send(&acquire, conn);
                match (reply.as_slice(), expected) {
                    ([1, fence, _], Grant::Granted(Some(modelled))) => {
                        nested += usize::from(reentry);
                        fences.check(*fence as u64, modelled, &context)?
                    }
                    ([0, _], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            4 | 5 => {
                let expected = model.reentrant_release(owner, latest, now, mutants);
                let release = ReentrantRelease {
                    keys: &scripts.keys,
                    owner: &owner_text,
                    token: &token_text(latest),
                };
                let left: i64 = send(&release, conn);
                same(left >= 0, expected, &context)?;
            }
            6 => {
                let expected = model.renew_reentrant(latest, now, TTL);
                let renewed = renew(
                    &scripts.keys.key,
                    HoldKind::Reentrant,
                    &token_text(latest),
                    lease_ms,
                    conn,
                );
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                tick_keys(conn, &[&scripts.keys.key]);
            }
        }
        // The hash against the model's: owner, count, the holds, the fence.
        let fields: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&scripts.keys.key)
            .query(conn)
            .unwrap();
        let field = |name: &str| {
            fields
                .iter()
                .find(|(f, _)| f == name)
                .map(|(_, v)| v.clone())
        };
        let mut holds: Vec<String> = fields
            .iter()
            .filter_map(|(f, _)| f.strip_prefix("h:").map(str::to_string))
            .collect();
        holds.sort();
        let hash = model.reentrant_at(now);
        same(
            field("owner"),
            hash.map(|r| format!("o{}", r.owner)),
            &format!("{context}: owner"),
        )?;
        same(
            field("count"),
            hash.map(|r| r.count.to_string()),
            &format!("{context}: count"),
        )?;
        let mut modelled: Vec<String> = hash
            .map(|r| r.holds.iter().copied().map(token_text).collect())
            .unwrap_or_default();
        modelled.sort();
        same(holds, modelled, &format!("{context}: holds"))?;
        if let (Some(fence), Some(hash)) = (field("fence"), hash) {
            fences.check(
                fence.parse().unwrap(),
                hash.fence,
                &format!("{context}: fence"),
            )?;
        }
    }
    Ok(nested)
}

#[test]
fn the_reentrant_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = reentrant_scripts();
    let counts = bench.conforms(200, |seed, conn| run_reentrant(seed, &scripts, conn, &[]));
    let nested: usize = counts.into_iter().sum();
    // The runs reach what they are for: an owner's acquire re-entering its held lock with
    // another hold token (a holder resending its own is no re-entry).
    assert!(nested >= 100, "only {nested} re-entries in 200 runs");
    // The negative control: bugs in the model's reentrant mutex are told apart.
    let mutants = [
        Mutant::ReentrantFreedAtFirstRelease,
        Mutant::ResendCountedTwice,
        Mutant::ResendKeepsOldLease,
    ];
    bench.tells_apart(&mutants, 200, |seed, conn, mutant| {
        run_reentrant(seed, &scripts, conn, &[mutant])
    });
}

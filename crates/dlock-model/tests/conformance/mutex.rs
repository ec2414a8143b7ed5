//! The plain mutex: random sequences of acquire (and its resend with the same token),
//! release, renewal, the lazily drawn fence (and its resend), and expiry, through the real
//! scripts and the model's transitions side by side; after every step the replies and the
//! keys (holder, fencing counter, fence record) must agree.

use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use dlock::__scripts::{AcquireReply, DrawFence, HoldKind, LockKeys, MutexAcquire, MutexRelease};

use super::harness::{renew, same, tick_keys, token_text, Bench, Fences, TICK_MS, TTL};
use super::library::{lock_keys, named_key, send};

/// The mutex's keys as the library names them: every call of the suite is composed from
/// them (`dlock::__scripts`), and the keys read back are theirs.
pub struct Scripts {
    pub keys: LockKeys,
    /// Its fence record (`fenced`).
    pub record: String,
}

/// One operation of the test's random runs.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    Acquire { client: u8, eager: bool },
    Resend { eager: bool },
    Release { client: u8 },
    Renew { client: u8 },
    Fence { client: u8 },
    Tick,
}

pub fn run(
    seed: u64,
    scripts: &Scripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Server::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 2];
    let mut last: Option<(Token, bool)> = None;
    let mut fences = Fences::default();
    for step in 0..40 {
        let client = rng.random_range(0..2u8);
        let op = match rng.random_range(0..10) {
            0..=2 => Op::Acquire {
                client,
                eager: rng.random_bool(0.5),
            },
            // A resend carries what its first send did.
            3 => match last {
                Some((_, eager)) => Op::Resend { eager },
                None => continue,
            },
            4 | 5 => Op::Release { client },
            6 => Op::Renew { client },
            7 => Op::Fence { client },
            _ => Op::Tick,
        };
        // The client's latest token (a release, renewal or fence of a hold it may have
        // lost: the scripts must refuse what is not theirs).
        let context = format!("seed {seed}, step {step}: {op:?}");
        let lease_ms = u64::from(TTL) * TICK_MS;
        // The client's latest token (a release, renewal or fence of a hold it may have
        // lost: the scripts must refuse what is not theirs).
        let latest = |client: u8, attempts: &[u8; 2]| Token {
            client,
            attempt: attempts[client as usize].saturating_sub(1),
        };
        let acquire_token = match op {
            Op::Acquire { client, .. } => {
                let token = Token {
                    client,
                    attempt: attempts[client as usize],
                };
                attempts[client as usize] += 1;
                Some(token)
            }
            // A resend: the last attempt's token again, as after a lost reply.
            Op::Resend { .. } => last.map(|(token, _)| token),
            _ => None,
        };
        match op {
            Op::Acquire { eager, .. } | Op::Resend { eager } => {
                let Some(token) = acquire_token else {
                    continue;
                };
                last = Some((token, eager));
                let expected = model.mutex_acquire(token, now, TTL, eager, mutants);
                let reply = acquire(&scripts.keys, token, lease_ms, eager, conn);
                match (reply.as_slice(), expected) {
                    ([1], Grant::Granted(None)) | ([0, _], Grant::Busy) => {}
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        fences.check(*fence as u64, modelled, &context)?
                    }
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            Op::Release { client } => {
                let token = latest(client, &attempts);
                let expected = model.mutex_release(token, now, mutants);
                let released = release(&scripts.keys, token, conn);
                same(released == 1, expected, &context)?;
            }
            Op::Renew { client } => {
                let token = latest(client, &attempts);
                let expected = model.renew_string(token, now, TTL);
                let renewed = renew(
                    &scripts.keys.key,
                    HoldKind::String,
                    &token_text(token),
                    lease_ms,
                    conn,
                );
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            Op::Fence { client } => {
                let token = latest(client, &attempts);
                let expected = model.mutex_fence(token, now, mutants);
                let draw = DrawFence {
                    keys: &scripts.keys,
                    token: &token_text(token),
                };
                let fence: i64 = send(&draw, conn);
                match (fence, expected) {
                    (0, None) => {}
                    (fence, Some(modelled)) if fence > 0 => {
                        fences.check(fence as u64, modelled, &context)?
                    }
                    (other, _) => {
                        return Err(format!("{context}: {other}, the model says {expected:?}"))
                    }
                }
            }
            Op::Tick => {
                now += 1;
                model.expire(now);
                // A tick passes on the server too: every lease a tick shorter.
                tick_keys(conn, &[&scripts.keys.key, &scripts.record]);
            }
        }
        compare(scripts, &model, now, conn, &mut fences, &context)?;
    }
    Ok(())
}

/// The server's keys against the model's.
pub fn compare(
    scripts: &Scripts,
    model: &Server,
    now: u8,
    conn: &mut redis::Connection,
    fences: &mut Fences,
    context: &str,
) -> Result<(), String> {
    let holder: Option<String> = redis::cmd("GET")
        .arg(&scripts.keys.key)
        .query(conn)
        .unwrap();
    same(
        holder,
        model.holder(now).map(token_text),
        &format!("{context}: holder"),
    )?;
    // The counter: drawn or not, and the last fence drawn, in the fences' order.
    fences.check_counter(conn, &scripts.keys.fence, model.counter, context)?;
    // The fence record: whose, and which fence.
    let record: Option<String> = redis::cmd("GET").arg(&scripts.record).query(conn).unwrap();
    let record = record.map(|r| {
        let (token, fence) = r.rsplit_once('|').unwrap();
        (token.to_string(), fence.parse::<u64>().unwrap())
    });
    let model_record = model.fenced.filter(|r| r.2 > now);
    same(
        record.as_ref().map(|r| r.0.clone()),
        model_record.map(|r| token_text(r.0)),
        &format!("{context}: fence record"),
    )?;
    if let (Some((_, fence)), Some((_, modelled, _))) = (record, model_record) {
        fences.check(fence, modelled, &format!("{context}: fence record"))?;
    }
    Ok(())
}

pub fn scripts() -> Scripts {
    scripts_for("m")
}

/// The keys of the mutex `name`.
pub fn scripts_for(name: &str) -> Scripts {
    let keys = lock_keys(name);
    let record = named_key(&keys, "fenced");
    Scripts { keys, record }
}

#[test]
fn the_mutex_scripts_do_what_the_model_says() {
    let scripts = scripts();
    Bench::start().conforms(300, |seed, conn| run(seed, &scripts, conn, &[]));
}

/// The negative control: a model with a bug in a transition is told apart from the
/// scripts within the same runs.
#[test]
fn a_model_with_a_bug_is_told_apart_from_the_scripts() {
    let scripts = scripts();
    let mutants = [
        Mutant::ResendKeepsOldLease,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::FenceOutsideGrant,
    ];
    Bench::start().tells_apart(&mutants, 300, |seed, conn, mutant| {
        run(seed, &scripts, conn, &[mutant])
    });
}

/// The mutex's acquire for `token` (with the fence at grant when `eager`), as the library
/// sends it.
pub fn acquire(
    keys: &LockKeys,
    token: Token,
    lease_ms: u64,
    eager: bool,
    conn: &mut redis::Connection,
) -> Vec<i64> {
    let acquire = MutexAcquire {
        keys,
        token: &token_text(token),
        lease_ms,
        eager,
        tell_clock: false,
    };
    send::<AcquireReply>(&acquire, conn).0
}

/// The mutex's release by `token`: 1 when it held.
pub fn release(keys: &LockKeys, token: Token, conn: &mut redis::Connection) -> i64 {
    let release = MutexRelease {
        keys,
        token: &token_text(token),
    };
    send(&release, conn)
}

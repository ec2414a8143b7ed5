//! The election follows the model: random runs of three campaigners send the mutex's
//! acquire with the fence at grant (the campaign, and its resend with the same token),
//! `election proclaim` (also by a leader whose hold ended), `election resign`, the
//! mutex's release and renewal, `election leader` (an observer's look) and ticks, on a
//! real server beside `election.rs`'s [`ElectionKeys`] over the mutex's transitions; after
//! every step the replies, the holder, the fencing counter and the leader record (token,
//! value, term) must agree, the terms in the fences' order.

use dlock::__scripts::{HoldKind, LookAtLeader, Proclaim, Resign};
use dlock_model::election::{ElectionKeys, Look};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{renew, same, tick_keys, token_text, Bench, Fences, SLACK_MS, TICK_MS, TTL};
use super::library::send;
use super::mutex::{self, scripts, Scripts};

/// The keys an election run names: the mutex's, and the election's leader record (and its
/// observers' channel), as the library names them.
pub struct ElectionScripts {
    mutex: Scripts,
    election: dlock::__scripts::ElectionKeys,
}

pub fn election_scripts() -> ElectionScripts {
    let mutex = scripts();
    let election = dlock::__scripts::ElectionKeys::new(&mutex.keys);
    ElectionScripts { mutex, election }
}

fn value_text(v: u8) -> String {
    format!("v{v}")
}

/// How often a run met each branch of the scripts.
#[derive(Default, Debug)]
pub struct ElectionReached {
    /// Proclaims recorded.
    pub recorded: usize,
    /// Proclaims refused (not held).
    pub refused: usize,
    /// Looks that found a leader.
    pub led: usize,
    /// Looks that found nobody though a record was there (its hold ended, or another
    /// holds without proclaiming yet).
    pub record_ignored: usize,
    /// Resigns that cleared the record.
    pub cleared: usize,
    /// Resigns that left it (another's, or none).
    pub left: usize,
}

/// A campaigner's last grant: its token, and its term as the server and the model drew it.
#[derive(Clone, Copy)]
struct Term {
    token: Token,
    server: u64,
    model: u64,
}

/// One random run of an election with three campaigners and an observer.
pub fn run_election(
    seed: u64,
    scripts: &ElectionScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut ElectionReached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut server = Server::default();
    let mut keys = ElectionKeys::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 3];
    let mut terms: [Option<Term>; 3] = [None; 3];
    let mut last_campaign: Option<Token> = None;
    let mut fences = Fences::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let c = usize::from(client);
        let choice = rng.random_range(0..13);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A campaign's attempt (the fence drawn at grant: the term), or its resend.
            0..=3 => {
                let token = if choice == 3 {
                    match last_campaign {
                        Some(token) => token,
                        None => continue,
                    }
                } else {
                    attempts[c] += 1;
                    Token {
                        client,
                        attempt: attempts[c] - 1,
                    }
                };
                last_campaign = Some(token);
                let expected = server.mutex_acquire(token, now, TTL, true, mutants);
                let reply = mutex::acquire(&scripts.mutex.keys, token, lease_ms, true, conn);
                match (reply.as_slice(), expected) {
                    ([1, fence], Grant::Granted(Some(modelled))) => {
                        fences.check(*fence as u64, modelled, &context)?;
                        terms[usize::from(token.client)] = Some(Term {
                            token,
                            server: *fence as u64,
                            model: modelled,
                        });
                    }
                    ([0, _], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            // Proclaim with the campaigner's last grant (its hold may have ended), or
            // proclaim again (a resend, or a new value).
            4..=5 => {
                let Some(term) = terms[c] else { continue };
                let value = rng.random_range(0..2u8);
                let expected = keys.proclaim(&server, term.token, value, term.model, now, mutants);
                let proclaim = Proclaim {
                    keys: &scripts.election,
                    token: &token_text(term.token),
                    value: &value_text(value),
                    term: term.server,
                };
                let recorded: i64 = send(&proclaim, conn);
                same(recorded == 1, expected, &context)?;
                match expected {
                    true => reached.recorded += 1,
                    false => reached.refused += 1,
                }
            }
            6 => {
                let Some(term) = terms[c] else { continue };
                let expected = keys.resign(term.token);
                let resign = Resign {
                    keys: &scripts.election,
                    token: &token_text(term.token),
                };
                let cleared: i64 = send(&resign, conn);
                same(cleared == 1, expected, &context)?;
                match expected {
                    true => reached.cleared += 1,
                    false => reached.left += 1,
                }
            }
            7 => {
                let Some(term) = terms[c] else { continue };
                let expected = server.mutex_release(term.token, now, mutants);
                let released = mutex::release(&scripts.mutex.keys, term.token, conn);
                same(released == 1, expected, &context)?;
            }
            8 => {
                let Some(term) = terms[c] else { continue };
                let expected = server.renew_string(term.token, now, TTL);
                let renewed = renew(
                    &scripts.mutex.keys.key,
                    HoldKind::String,
                    &token_text(term.token),
                    lease_ms,
                    conn,
                );
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            9..=10 => {
                let expected = keys.leader(&server, now, mutants);
                let look = LookAtLeader {
                    keys: &scripts.election,
                };
                let reply: redis::Value = send(&look, conn);
                look_agrees(&reply, expected, &mut fences, &context)?;
                match expected {
                    Look::Leader { .. } => reached.led += 1,
                    Look::Nobody if keys.record.is_some() => reached.record_ignored += 1,
                    Look::Nobody => {}
                }
            }
            _ => {
                now += 1;
                server.expire(now);
                tick_keys(conn, &[&scripts.mutex.keys.key]);
            }
        }
        compare_election(scripts, &server, &keys, now, &mut fences, conn, &context)?;
    }
    Ok(())
}

/// leader.lua's reply against the model's look: the value, the term (in the fences'
/// order) and the lease left (within the tick it is in).
fn look_agrees(
    reply: &redis::Value,
    expected: Look,
    fences: &mut Fences,
    context: &str,
) -> Result<(), String> {
    use redis::Value as V;
    let text = |value: &V| redis::from_redis_value::<String>(value.clone()).ok();
    match (reply, expected) {
        (V::Array(items), Look::Nobody) if items.is_empty() => Ok(()),
        (
            V::Array(items),
            Look::Leader {
                value,
                term,
                remaining,
            },
        ) if items.len() == 3 => {
            same(
                text(&items[0]),
                Some(value_text(value)),
                &format!("{context}: leader's value"),
            )?;
            let server_term: u64 = text(&items[1])
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| format!("{context}: term {:?}", items[1]))?;
            fences.check(server_term, term, &format!("{context}: leader's term"))?;
            let V::Int(pttl) = items[2] else {
                return Err(format!("{context}: lease left {:?}", items[2]));
            };
            let most = u64::from(remaining) * TICK_MS;
            if pttl <= 0 || pttl as u64 > most || (pttl as u64) + SLACK_MS <= most {
                return Err(format!(
                    "{context}: {pttl} ms of lease left, the model says {remaining} ticks"
                ));
            }
            Ok(())
        }
        (other, _) => Err(format!("{context}: {other:?}, the model says {expected:?}")),
    }
}

/// The server's keys against the model's: holder, counter, leader record.
fn compare_election(
    scripts: &ElectionScripts,
    server: &Server,
    keys: &ElectionKeys,
    now: u8,
    fences: &mut Fences,
    conn: &mut redis::Connection,
    context: &str,
) -> Result<(), String> {
    let holder: Option<String> = redis::cmd("GET")
        .arg(&scripts.mutex.keys.key)
        .query(conn)
        .unwrap();
    same(
        holder,
        server.holder(now).map(token_text),
        &format!("{context}: holder"),
    )?;
    fences.check_counter(conn, &scripts.mutex.keys.fence, server.counter, context)?;
    let fields: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(&scripts.election.record)
        .arg("token")
        .arg("value")
        .arg("term")
        .query(conn)
        .unwrap();
    let context = format!("{context}: leader record");
    let record = match fields.as_slice() {
        [None, None, None] => None,
        [Some(token), Some(value), Some(term)] => Some((token.clone(), value.clone(), term)),
        other => return Err(format!("{context}: {other:?}")),
    };
    same(
        record
            .as_ref()
            .map(|(token, value, _)| (token.clone(), value.clone())),
        keys.record
            .map(|r| (token_text(r.token), value_text(r.value))),
        &context,
    )?;
    if let (Some((_, _, term)), Some(modelled)) = (record, keys.record) {
        let term: u64 = term
            .parse()
            .map_err(|_| format!("{context}: term {term}"))?;
        fences.check(term, modelled.term, &format!("{context}: term"))?;
    }
    Ok(())
}

#[test]
fn the_election_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = election_scripts();
    let mut reached = ElectionReached::default();
    bench.conforms(300, |seed, conn| {
        run_election(seed, &scripts, conn, &[], &mut reached)
    });
    let ElectionReached {
        recorded,
        refused,
        led,
        record_ignored,
        cleared,
        left,
    } = reached;
    for (what, count) in [
        ("proclaims recorded", recorded),
        ("proclaims refused", refused),
        ("looks that found a leader", led),
        ("looks that ignored a record", record_ignored),
        ("resigns that cleared", cleared),
        ("resigns that left the record", left),
    ] {
        assert!(count >= 50, "{what}: {count} in 300 runs ({reached:?})");
    }
    // The negative control: a model with a bug in a script's transition is told apart
    // within the same runs.
    let mutants = [
        Mutant::ProclaimWithoutOwnerCheck,
        Mutant::LeaderWithoutHoldCheck,
    ];
    bench.tells_apart_often(&mutants, 300, 25, |seed, conn, mutant| {
        run_election(seed, &scripts, conn, &[mutant], &mut Default::default())
    });
}

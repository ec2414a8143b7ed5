//! Guarded writes follow the model: random runs send `guarded apply` (a new batch, or the
//! last one resent with its id, as after a lost reply) between the mutex's own scripts
//! (acquire and its resend, release, renewal) and ticks, on a real server beside
//! `guarded.rs`'s [`GuardedKeys::apply`] over the mutex's transitions; after every step
//! the replies, the holder, both data keys (type and value) and every holder's batch
//! record (its id and the answer it keeps) must agree.

use dlock::__scripts::{batch_record_key, guarded_data_key, ApplyBatch, HoldKind, LockKeys};
use dlock_model::guarded::{Answer, Batch, BatchId, Command, Data, GuardedKeys, Reply};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{renew, Bench};
use super::harness::{same, tick_keys, token_text, TICK_MS, TTL};
use super::library::send;
use super::mutex::{self, scripts, Scripts};

/// The keys a guarded run names (the mutex's), and the test's reader of a batch record.
pub struct GuardedScripts {
    mutex: Scripts,
    /// Reads a batch record (`<id> <msgpack answer>`) as `{id, answer}`: the test reads
    /// what the record keeps as the script would answer it.
    record: redis::Script,
}

pub fn guarded_scripts() -> GuardedScripts {
    GuardedScripts {
        mutex: scripts(),
        record: redis::Script::new(
            r#"
local r = redis.call('GET', KEYS[1])
if not r then return false end
local space = string.find(r, ' ', 1, true)
return {string.sub(r, 1, space - 1), cmsgpack.unpack(string.sub(r, space + 1))}
"#,
        ),
    }
}

/// The data key `k` (`a` or `b`) beside the lock `keys`, as the library names it.
fn data_key(keys: &LockKeys, k: u8) -> String {
    guarded_data_key(keys, ["a", "b"][usize::from(k)])
}

/// The holder's batch record key, as the library names it.
fn record_key(keys: &LockKeys, token: Token) -> String {
    batch_record_key(keys, &token_text(token))
}

fn id_text(id: BatchId) -> String {
    format!("b{}.{}", id.client, id.number)
}

fn value_text(v: u8) -> String {
    format!("v{v}")
}

/// A random batch of up to three commands on the two data keys.
fn random_batch(rng: &mut impl Rng, id: BatchId) -> Batch {
    let commands = (0..rng.random_range(0..=3))
        .map(|_| {
            let k = rng.random_range(0..2u8);
            match rng.random_range(0..4) {
                0 => Command::Get(k),
                1 => Command::IncrBy(k, rng.random_range(-2..=3)),
                2 => Command::RPush(k, rng.random_range(0..2)),
                _ => Command::Del(k),
            }
        })
        .collect();
    Batch { id, commands }
}

/// The batch as the library's `Guarded` holds it (the data keys `a` and `b`).
fn guarded_batch(batch: &Batch) -> dlock::Guarded {
    let name = |k: u8| ["a", "b"][usize::from(k)];
    batch
        .commands
        .iter()
        .fold(dlock::Guarded::new(), |guarded, &command| match command {
            Command::Get(k) => guarded.get(name(k)),
            Command::IncrBy(k, by) => guarded.incr_by(name(k), by),
            Command::RPush(k, v) => guarded.rpush(name(k), value_text(v)),
            Command::Del(k) => guarded.del(name(k)),
        })
}

/// The script's answer as the model writes it; `None` for a shape the model has not.
fn answer_of(value: &redis::Value) -> Option<Answer> {
    use redis::Value as V;
    let V::Array(items) = value else {
        return None;
    };
    match items.as_slice() {
        [V::Int(0)] => Some(Answer::NotHeld),
        [V::Int(1), V::Array(replies)] => replies
            .iter()
            .map(|reply| match reply {
                V::Int(n) => Some(Reply::Int(*n)),
                V::Nil => Some(Reply::Nil),
                V::BulkString(bytes) => Some(Reply::Text(String::from_utf8(bytes.clone()).ok()?)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Answer::Applied),
        [V::Int(2), V::Int(n), V::BulkString(error)] if error.starts_with(b"WRONGTYPE") => {
            Some(Answer::Refused(*n as u8))
        }
        _ => None,
    }
}

/// How often a run met each branch of the script.
#[derive(Default, Debug)]
pub struct GuardedReached {
    /// Batches that ran.
    pub applied: usize,
    /// Batches refused for the hold.
    pub not_held: usize,
    /// Batches with a refused command.
    pub refused: usize,
    /// Resends answered from the record.
    pub from_record: usize,
    /// Resends that ran again (no record: a batch of reads, or the record expired).
    pub ran_again: usize,
}

/// One random run of guarded writes by two clients.
pub fn run_guarded(
    seed: u64,
    scripts: &GuardedScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut GuardedReached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut server = Server::default();
    let mut keys = GuardedKeys::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 2];
    let mut batches = [0u8; 2];
    let mut last_acquire: Option<Token> = None;
    // Each client's last batch, with the token it was sent with.
    let mut last_batch: [Option<(Token, Batch)>; 2] = [None, None];
    let lease_ms = u64::from(TTL) * TICK_MS;
    for step in 0..40 {
        let client = rng.random_range(0..2u8);
        let c = usize::from(client);
        let latest = Token {
            client,
            attempt: attempts[c].saturating_sub(1),
        };
        let choice = rng.random_range(0..13);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // The mutex's acquire (lazy fence), or its resend with the same token.
            0..=3 => {
                let token = if choice == 3 {
                    match last_acquire {
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
                last_acquire = Some(token);
                let expected = server.mutex_acquire(token, now, TTL, false, mutants);
                let reply = mutex::acquire(&scripts.mutex.keys, token, lease_ms, false, conn);
                match (reply.as_slice(), expected) {
                    ([1], Grant::Granted(None)) | ([0, _], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            4 => {
                let expected = server.mutex_release(latest, now, mutants);
                let released = mutex::release(&scripts.mutex.keys, latest, conn);
                same(released == 1, expected, &context)?;
            }
            5 => {
                let expected = server.renew_string(latest, now, TTL);
                let text = token_text(latest);
                let keys = &scripts.mutex.keys;
                let renewed = renew(&keys.key, HoldKind::String, &text, lease_ms, conn);
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            // A new batch with the client's latest token (a paused holder's too), or its
            // last batch resent: the same token, id and commands.
            6..=10 => {
                let (token, batch) = if choice <= 8 {
                    let id = BatchId {
                        client,
                        number: batches[c],
                    };
                    batches[c] += 1;
                    (latest, random_batch(&mut rng, id))
                } else {
                    match &last_batch[c] {
                        Some(sent) => sent.clone(),
                        None => continue,
                    }
                };
                last_batch[c] = Some((token, batch.clone()));
                let record_ttl = if batch.writes() { TTL } else { 0 };
                let (expected, ran) = keys.apply(&server, token, &batch, record_ttl, now, mutants);
                let apply = ApplyBatch {
                    keys: &scripts.mutex.keys,
                    kind: HoldKind::String,
                    token: &token_text(token),
                    id: &id_text(batch.id),
                    record_ms: u64::from(record_ttl) * TICK_MS,
                    batch: &guarded_batch(&batch),
                };
                let reply: redis::Value = send(&apply, conn);
                same(answer_of(&reply), Some(expected.clone()), &context)?;
                let resent = choice > 8;
                match (&expected, ran) {
                    (Answer::NotHeld, _) => reached.not_held += 1,
                    (_, false) => reached.from_record += 1,
                    (Answer::Refused(_), true) => reached.refused += 1,
                    (Answer::Applied(_), true) => reached.applied += 1,
                }
                if resent && ran {
                    reached.ran_again += 1;
                }
            }
            _ => {
                now += 1;
                server.expire(now);
                keys.expire(now);
                let mut ticking = vec![scripts.mutex.keys.key.clone()];
                for (client, &used) in attempts.iter().enumerate() {
                    for attempt in 0..used {
                        ticking.push(record_key(
                            &scripts.mutex.keys,
                            Token {
                                client: client as u8,
                                attempt,
                            },
                        ));
                    }
                }
                let ticking: Vec<&str> = ticking.iter().map(String::as_str).collect();
                tick_keys(conn, &ticking);
            }
        }
        compare_guarded(&server, &keys, now, &attempts, scripts, conn, &context)?;
    }
    Ok(())
}

/// The server's keys against the model's: holder, data keys, batch records.
fn compare_guarded(
    server: &Server,
    keys: &GuardedKeys,
    now: u8,
    attempts: &[u8; 2],
    scripts: &GuardedScripts,
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
    for k in 0..2u8 {
        let key = data_key(&scripts.mutex.keys, k);
        let kind: String = redis::cmd("TYPE").arg(&key).query(conn).unwrap();
        let data = match kind.as_str() {
            "none" => None,
            "string" => {
                let text: String = redis::cmd("GET").arg(&key).query(conn).unwrap();
                Some(Data::Int(text.parse().unwrap()))
            }
            "list" => {
                let items: Vec<String> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(conn)
                    .unwrap();
                Some(Data::List(
                    items
                        .iter()
                        .map(|item| item.trim_start_matches('v').parse().unwrap())
                        .collect(),
                ))
            }
            other => return Err(format!("{context}: {key} is a {other}")),
        };
        same(
            data,
            keys.data.get(&k).cloned(),
            &format!("{context}: {key}"),
        )?;
    }
    for (client, &used) in attempts.iter().enumerate() {
        for attempt in 0..used {
            let token = Token {
                client: client as u8,
                attempt,
            };
            let record: redis::Value = scripts
                .record
                .key(record_key(&scripts.mutex.keys, token))
                .invoke(conn)
                .unwrap();
            let record = match record {
                redis::Value::Nil => None,
                redis::Value::Array(items) if items.len() == 2 => {
                    let id: String = redis::from_redis_value(items[0].clone()).unwrap();
                    Some((id, answer_of(&items[1])))
                }
                other => return Err(format!("{context}: record {other:?}")),
            };
            let modelled = keys
                .records
                .get(&token)
                .filter(|r| r.2 > now)
                .map(|(id, answer, _)| (id_text(*id), Some(answer.clone())));
            same(
                record,
                modelled,
                &format!("{context}: record of {}", token_text(token)),
            )?;
        }
    }
    Ok(())
}

#[test]
fn the_guarded_apply_script_does_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = guarded_scripts();
    let mut reached = GuardedReached::default();
    bench.conforms(300, |seed, conn| {
        run_guarded(seed, &scripts, conn, &[], &mut reached)
    });
    // Every branch of the script, many times over.
    let GuardedReached {
        applied,
        not_held,
        refused,
        from_record,
        ran_again,
    } = reached;
    for (what, count) in [
        ("applied", applied),
        ("not held", not_held),
        ("refused commands", refused),
        ("resends answered from the record", from_record),
        ("resends run again", ran_again),
    ] {
        assert!(count >= 50, "{what}: {count} in 300 runs ({reached:?})");
    }
    // The negative control: a model with a bug in the script's transition is told apart
    // within the same runs.
    let mutants = [Mutant::ApplyWithoutHoldCheck, Mutant::ResendAppliesTwice];
    bench.tells_apart_often(&mutants, 300, 25, |seed, conn, mutant| {
        run_guarded(seed, &scripts, conn, &[mutant], &mut Default::default())
    });
}

//! The model follows the scripts: random sequences of the plain mutex's operations —
//! acquire (and its resend with the same token), release, renewal, the lazily drawn fence
//! (and its resend), and expiry — run through the real Lua scripts on a real server and
//! through the model's transitions (`scripts.rs`) side by side; after every step the
//! replies and the keys (holder, fencing counter, fence record) must agree.
//!
//! The semaphore's scripts (acquire and its resend, release, renewal) run the same way, and
//! so do the fair mutex's (acquire, waiting or single, and its next attempt; release with
//! its hand-off to the first in line; leaving the line; renewal), the live waiters in line
//! compared in order, the reentrant mutex's (acquire, new or resent, release of one
//! hold, renewal), its hash's owner, count and holds compared, and the read-write lock's
//! (read and write acquire and resend, release, renewal; no writer queue, no re-entry),
//! its live read holds and writer compared; and one Redlock master's (acquire with the
//! fence drawn at grant and its origin told, raise, release, restart empty) beside
//! `redlock.rs`'s `Master`.
//!
//! Time is not waited for: a tick shortens every key's real TTL by a tick (and, for the
//! semaphore, moves every permit's stored end a tick earlier, for the fair mutex every
//! waiter lease's, so the scripts' own `end <= now` decides); a key with at most a tick (plus the run's few milliseconds) left
//! is deleted, as Redis would expire it within that tick. So a run takes no time, and a
//! transition that kept or restarted a lease differently from the script shows.

use dlock_model::mutant::Mutant;
use dlock_model::redlock::Master;
use dlock_model::scripts::{Grant, Server, Token};
use dlock_testkit::RedisServer;
use rand::{Rng, SeedableRng};

mod election;
mod guarded;
mod library;

mod admin;
mod kinds;
mod linger;
mod multi;
mod tokens;
mod weighted;

use library::LibraryScript;

/// Every suite's run for one seed, as the coverage test runs them: a suite added for a
/// script the library sends is called here too. Divergences are the suites' own tests'
/// to report; this only calls the scripts.
fn run_every_suite(seed: u64, conn: &mut redis::Connection) {
    let _ = run(seed, &scripts(), conn, &[]);
    let _ = run_semaphore(
        seed,
        &semaphore_scripts(),
        conn,
        &[],
        &mut SemaphoreReached::default(),
    );
    let _ = run_fair(seed, &fair_scripts(), conn, &[]);
    let _ = run_reentrant(seed, &reentrant_scripts(), conn, &[]);
    let _ = run_rw(seed, &rw_scripts(), conn, &[], &mut RwReached::default());
    let raise = LibraryScript::named("redlock fence raise");
    let mut reached = RedlockReached::default();
    let _ = run_redlock_master(seed, &scripts(), &raise, conn, None, &mut reached);
    let _ = guarded::run_guarded(
        seed,
        &guarded::guarded_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    let _ = election::run_election(
        seed,
        &election::election_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    admin::run_suites(seed, conn);
    linger::run_linger_suite(seed, conn);
    let _ = weighted::run_weighted(
        seed,
        &semaphore_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    multi::run_multi_suite(seed, conn);
}

/// Every script the library sends (`dlock::__library_scripts`, not a list kept here) is
/// called by a conformance suite: a script added to the library without a run beside the
/// model fails here.
#[test]
fn every_script_the_library_sends_is_in_a_conformance_run() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for seed in 0..10 {
        run_every_suite(seed, &mut conn);
    }
    let called = library::called();
    let missing: Vec<_> = dlock::__library_scripts()
        .into_iter()
        .map(|script| script.name)
        .filter(|name| !called.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "scripts the library sends that no conformance suite runs: {missing:?}"
    );
}

const LOCK: &str = "m";
const FENCE: &str = "m:fence";
const RECORD: &str = "m:fenced";
/// A model tick on the server: leases are long, and expiry is applied by the test.
const TICK_MS: u64 = 60_000;
const TTL: u8 = 2;
/// Real time a run may take (ms): a lease this close to a tick's end ends with the tick.
const SLACK_MS: u64 = 5_000;

struct Scripts {
    acquire: LibraryScript,
    release: LibraryScript,
    fence: LibraryScript,
    renew: LibraryScript,
}

fn token_text(token: Token) -> String {
    format!("t{}.{}", token.client, token.attempt)
}

/// One operation of the test's random runs.
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire { client: u8, eager: bool },
    Resend { eager: bool },
    Release { client: u8 },
    Renew { client: u8 },
    Fence { client: u8 },
    Tick,
}

fn run(
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
                let reply: Vec<i64> = scripts
                    .acquire
                    .key(LOCK)
                    .key(FENCE)
                    .arg(token_text(token))
                    .arg(lease_ms)
                    .arg(if eager { "1" } else { "0" })
                    .arg("0")
                    .invoke(conn)
                    .unwrap();
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
                let released: i64 = scripts
                    .release
                    .key(LOCK)
                    .arg(token_text(token))
                    .arg("m:released")
                    .invoke(conn)
                    .unwrap();
                same(released == 1, expected, &context)?;
            }
            Op::Renew { client } => {
                let token = latest(client, &attempts);
                let expected = model.renew_string(token, now, TTL);
                let renewed: Vec<i64> = scripts
                    .renew
                    .key(LOCK)
                    .arg("s")
                    .arg(token_text(token))
                    .arg(lease_ms)
                    .invoke(conn)
                    .unwrap();
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            Op::Fence { client } => {
                let token = latest(client, &attempts);
                let expected = model.mutex_fence(token, now, mutants);
                let fence: i64 = scripts
                    .fence
                    .key(LOCK)
                    .key(FENCE)
                    .key(RECORD)
                    .arg(token_text(token))
                    .invoke(conn)
                    .unwrap();
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
                tick_keys(conn, &[LOCK, RECORD]);
            }
        }
        compare(&model, now, conn, &mut fences, &context)?;
    }
    Ok(())
}

/// A tick on the server for `keys`: each key's expiry comes a tick closer; a key with at
/// most a tick (and the run's slack) left is deleted, as Redis would expire it within it.
fn tick_keys(conn: &mut redis::Connection, keys: &[&str]) {
    for &key in keys {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        if pttl > 0 && pttl as u64 <= TICK_MS + SLACK_MS {
            let _: () = redis::cmd("DEL").arg(key).query(conn).unwrap();
        } else if pttl > 0 {
            let _: () = redis::cmd("PEXPIRE")
                .arg(key)
                .arg(pttl as u64 - TICK_MS)
                .query(conn)
                .unwrap();
        }
    }
}

/// The fences seen, the server's beside the model's: the server's are the clock floor (µs),
/// the model's a plain count, so they must agree in order and in equality, not in value.
#[derive(Default)]
struct Fences(Vec<(u64, u64)>);

impl Fences {
    fn check(&mut self, server: u64, model: u64, context: &str) -> Result<(), String> {
        for &(s, m) in &self.0 {
            if server.cmp(&s) != model.cmp(&m) {
                return Err(format!(
                    "{context}: fence {server} (model {model}) against {s} (model {m})"
                ));
            }
        }
        self.0.push((server, model));
        Ok(())
    }

    /// The fencing counter at `key` against the model's (0: none): both drawn or neither,
    /// and in the fences' order.
    fn check_counter(
        &mut self,
        conn: &mut redis::Connection,
        key: &str,
        model: u64,
        context: &str,
    ) -> Result<(), String> {
        let context = format!("{context}: counter");
        let counter: Option<u64> = redis::cmd("GET").arg(key).query(conn).unwrap();
        same(counter.is_some(), model > 0, &context)?;
        match counter {
            Some(counter) => self.check(counter, model, &context),
            None => Ok(()),
        }
    }
}

fn same<T: PartialEq + std::fmt::Debug>(server: T, model: T, context: &str) -> Result<(), String> {
    if server == model {
        Ok(())
    } else {
        Err(format!(
            "{context}: the script says {server:?}, the model {model:?}"
        ))
    }
}

/// The server's keys against the model's.
fn compare(
    model: &Server,
    now: u8,
    conn: &mut redis::Connection,
    fences: &mut Fences,
    context: &str,
) -> Result<(), String> {
    let holder: Option<String> = redis::cmd("GET").arg(LOCK).query(conn).unwrap();
    same(
        holder,
        model.holder(now).map(token_text),
        &format!("{context}: holder"),
    )?;
    // The counter: drawn or not, and the last fence drawn, in the fences' order.
    fences.check_counter(conn, FENCE, model.counter, context)?;
    // The fence record: whose, and which fence.
    let record: Option<String> = redis::cmd("GET").arg(RECORD).query(conn).unwrap();
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

/// renew/renew.lua, as every kind sends it.
fn renew_script() -> LibraryScript {
    LibraryScript::named("renew")
}

fn scripts() -> Scripts {
    Scripts {
        acquire: LibraryScript::named("mutex acquire"),
        release: LibraryScript::named("mutex release"),
        fence: LibraryScript::named("fence"),
        renew: renew_script(),
    }
}

#[test]
fn the_mutex_scripts_do_what_the_model_says() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = scripts();
    for seed in 0..300 {
        if let Err(divergence) = run(seed, &scripts, &mut conn, &[]) {
            panic!("{divergence}");
        }
    }
}

/// The negative control: a model with a bug in a transition is told apart from the
/// scripts within the same runs.
#[test]
fn a_model_with_a_bug_is_told_apart_from_the_scripts() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = scripts();
    for mutant in [
        Mutant::ResendKeepsOldLease,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::FenceOutsideGrant,
    ] {
        let caught = (0..300).find_map(|seed| run(seed, &scripts, &mut conn, &[mutant]).err());
        assert!(caught.is_some(), "{mutant:?} went unnoticed in 300 runs");
    }
}

const PERMITS: &str = "s";
const PERMITS_INDEX: &str = "s:index";
const PERMITS_FENCE: &str = "s:fence";
const PERMITS_QUEUE: &str = "s:queue";
const PERMITS_LEASES: &str = "s:queue-leases";

/// A tick on the server for a hash of leased entries (the semaphore's permits, the
/// rwlock's read holds; a writer's string is left as it is): every entry's end, its index
/// score, '~ends' and the keys' expiry move a tick earlier (entries.lua's format), so the
/// scripts' own `end <= now` decides what expired.
const SHIFT_ENTRIES: &str = r#"
local tick = tonumber(ARGV[1])
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    local name, value = fields[i], fields[i + 1]
    if string.sub(name, 1, 2) == 'h:' then
      local ends, data = string.match(value, '^(%d+)|(.*)$')
      local shifted = string.format('%.0f', tonumber(ends) - tick)
      redis.call('HSET', KEYS[1], name, shifted .. '|' .. data)
      redis.call('ZADD', KEYS[2], shifted, string.sub(name, 3))
    elseif name == '~ends' then
      redis.call('HSET', KEYS[1], name, string.format('%.0f', tonumber(value) - tick))
    end
  end
end
for _, key in ipairs(KEYS) do
  local pttl = redis.call('PTTL', key)
  if pttl > 0 then
    if pttl <= tick then
      redis.call('DEL', key)
    else
      redis.call('PEXPIRE', key, pttl - tick)
    end
  end
end
"#;

struct SemaphoreScripts {
    acquire: LibraryScript,
    release: LibraryScript,
    cancel: LibraryScript,
    renew: LibraryScript,
    shift: redis::Script,
    shift_queue: redis::Script,
}

/// The entries of the hash at `key` (entries.lua's `h:<token>` = `<end>|...`), by the
/// server's clock and their ends: the live ones' tokens, sorted, and how many ended.
fn entries_at(conn: &mut redis::Connection, key: &str) -> (Vec<String>, usize) {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    let now_ms = seconds * 1000 + micros / 1000;
    let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).query(conn).unwrap();
    let (mut live, mut ended) = (Vec::new(), 0);
    for (name, value) in fields {
        let Some(token) = name.strip_prefix("h:") else {
            continue;
        };
        let end: u64 = value.split('|').next().unwrap().parse().unwrap();
        if end > now_ms {
            live.push(token.to_string());
        } else {
            ended += 1;
        }
    }
    live.sort();
    (live, ended)
}

/// A semaphore waiter's token as the library writes it (`QueueKeys::waiter_token`): what a
/// direct grant gives it, its ttl in ms and its N, follows its token.
fn permit_text(token: Token) -> String {
    format!("{}~{}~2", token_text(token), u64::from(TTL) * TICK_MS)
}

/// queue/cancel.lua (a waiter leaves the `line`: its queue, leases and wake prefix) beside
/// the model's `queue_cancel`. Their answers (whether it was in line) are compared for a
/// waiter whose waiter lease had not ended: a lapsed one the script finds until another
/// script purges it, while the model forgets a line all of whose leases ended (`expire`);
/// what is left in line is compared after the step either way.
fn leave_line(
    conn: &mut redis::Connection,
    cancel: &LibraryScript,
    (queue, leases, prefix): (&str, &str, &str),
    text: &str,
    model: &mut Server,
    token: Token,
    now: u8,
) -> Result<(), String> {
    let was_live = line_at(conn, queue, leases).iter().any(|w| w == text);
    let modelled_live = model.live_waiters(now).any(|t| t == token);
    let expected = model.queue_cancel(token);
    let left: i64 = cancel
        .key(queue)
        .key(leases)
        .arg(text)
        .arg(prefix)
        .invoke(conn)
        .unwrap();
    same(was_live, modelled_live, "in line before it left")?;
    if modelled_live {
        same(left == 1, expected, "left the line")?;
    }
    Ok(())
}

/// What the semaphore's runs reached.
#[derive(Default)]
struct SemaphoreReached {
    /// Releases that handed a permit to the first in line.
    hand_offs: usize,
    /// A waiter's next attempt (its token in line) granted.
    from_line: usize,
}

/// One random run of the semaphore of 2: three clients acquire (a wait, which takes a
/// place in line, or a single attempt that does not), try again with their token, resend
/// the last attempt, release (a hand-off of the freed permit to the first in line), leave
/// the line, renew; the clock ticks. The live permits, the counter and the live waiters in
/// line (in order) are compared after every step.
fn run_semaphore(
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

fn semaphore_scripts() -> SemaphoreScripts {
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
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = semaphore_scripts();
    let mut reached = SemaphoreReached::default();
    for seed in 0..200 {
        if let Err(divergence) = run_semaphore(seed, &scripts, &mut conn, &[], &mut reached) {
            panic!("{divergence}");
        }
    }
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
    for mutant in [
        Mutant::PermitCountOffByOne,
        Mutant::PurgeForgetsLiveReader,
        Mutant::ResendKeepsOldLease,
        Mutant::QueueSkipsHead,
        Mutant::QueueKeepsLapsedWaiters,
    ] {
        let caught = (0..200).find_map(|seed| {
            let reached = &mut SemaphoreReached::default();
            run_semaphore(seed, &scripts, &mut conn, &[mutant], reached).err()
        });
        assert!(caught.is_some(), "{mutant:?} went unnoticed in 200 runs");
    }
}

const FAIR: &str = "f";
const FAIR_FENCE: &str = "f:fence";
const FAIR_QUEUE: &str = "f:queue";
const FAIR_LEASES: &str = "f:queue-leases";
/// A waiter's lease on its place in line, in ticks (the model's fair mutex uses the same).
const WAITER_LEASE: u8 = 2;

/// A tick on the server for the fair mutex: every waiter lease ends a tick earlier (its
/// score), and every key's expiry comes a tick closer; a key with at most a tick left (and
/// the run's slack) is deleted, as Redis would expire it within that tick.
const SHIFT_QUEUE: &str = r#"
local tick, slack = tonumber(ARGV[1]), tonumber(ARGV[2])
local leases = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #leases, 2 do
  local shifted = string.format('%.0f', tonumber(leases[i + 1]) - tick)
  redis.call('ZADD', KEYS[2], shifted, leases[i])
end
for _, key in ipairs(KEYS) do
  local pttl = redis.call('PTTL', key)
  if pttl > 0 then
    if pttl <= tick + slack then
      redis.call('DEL', key)
    else
      redis.call('PEXPIRE', key, pttl - tick)
    end
  end
end
"#;

struct FairScripts {
    acquire: LibraryScript,
    release: LibraryScript,
    cancel: LibraryScript,
    renew: LibraryScript,
    shift: redis::Script,
}

fn fair_scripts() -> FairScripts {
    FairScripts {
        acquire: LibraryScript::named("fair mutex acquire"),
        release: LibraryScript::named("fair mutex release"),
        cancel: LibraryScript::named("queue leave"),
        renew: renew_script(),
        shift: redis::Script::new(SHIFT_QUEUE),
    }
}

/// A fair waiter's token as the library writes it (`QueueKeys::waiter_token`): what a
/// direct grant gives it, its ttl in ms, follows its token.
fn waiter_text(token: Token) -> String {
    format!("{}~{}", token_text(token), u64::from(TTL) * TICK_MS)
}

/// The waiters in line whose waiter lease has not ended (by the server's clock), in
/// arrival order.
fn live_waiters(conn: &mut redis::Connection) -> Vec<String> {
    line_at(conn, FAIR_QUEUE, FAIR_LEASES)
}

/// The waiters in the line at `queue` whose waiter lease (at `leases`) has not ended, by
/// the server's clock, in arrival order.
fn line_at(conn: &mut redis::Connection, queue: &str, leases: &str) -> Vec<String> {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    let now_ms = seconds * 1000 + micros / 1000;
    let line: Vec<String> = redis::cmd("ZRANGE")
        .arg(queue)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    line.into_iter()
        .filter(|waiter| {
            let end: Option<f64> = redis::cmd("ZSCORE")
                .arg(leases)
                .arg(waiter)
                .query(conn)
                .unwrap();
            end.is_some_and(|end| end as u64 > now_ms)
        })
        .collect()
}

/// One random run of the fair mutex: three clients acquire (waiting, which takes a place
/// in line, or a single attempt that does not), try again with their token, release (a
/// hand-off to the first in line), leave the line, renew; the clock ticks. Returns how
/// many releases handed the lock to a waiter.
fn run_fair(
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
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = fair_scripts();
    let mut hand_offs = 0;
    for seed in 0..200 {
        match run_fair(seed, &scripts, &mut conn, &[]) {
            Ok(handed) => hand_offs += handed,
            Err(divergence) => panic!("{divergence}"),
        }
    }
    // The runs reach what they are for: releases that hand the lock on.
    assert!(hand_offs >= 100, "only {hand_offs} hand-offs in 200 runs");
    // The negative control: bugs in the model's fair mutex are told apart.
    for mutant in [
        Mutant::HandOffWithoutOwnerCheck,
        Mutant::ReleaseSkipsHandOff,
        Mutant::HandOffReusesFence,
        Mutant::QueueKeepsLapsedWaiters,
        Mutant::GrantIgnoresQueue,
        Mutant::ResendKeepsOldLease,
    ] {
        let caught = (0..200).find_map(|seed| run_fair(seed, &scripts, &mut conn, &[mutant]).err());
        assert!(caught.is_some(), "{mutant:?} went unnoticed in 200 runs");
    }
}

const REENTRANT: &str = "r";
const REENTRANT_FENCE: &str = "r:fence";
/// The owner of each client's holds: clients 0 and 1 are one owner's nested holds.
const OWNERS: [u8; 3] = [0, 0, 1];

struct ReentrantScripts {
    acquire: LibraryScript,
    release: LibraryScript,
    renew: LibraryScript,
}

fn reentrant_scripts() -> ReentrantScripts {
    ReentrantScripts {
        acquire: LibraryScript::named("reentrant acquire"),
        release: LibraryScript::named("reentrant release"),
        renew: renew_script(),
    }
}

/// One random run of the reentrant mutex: two owners (one with two clients, its nested
/// holds) acquire and resend, give back holds, renew; the clock ticks. Returns how many
/// acquires re-entered a held lock (a new hold token of the owner, not a resend).
fn run_reentrant(
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
                let reply: Vec<i64> = scripts
                    .acquire
                    .key(REENTRANT)
                    .key(REENTRANT_FENCE)
                    .arg(&owner_text)
                    .arg(lease_ms)
                    .arg(token_text(token))
                    .invoke(conn)
                    .unwrap();
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
                let left: i64 = scripts
                    .release
                    .key(REENTRANT)
                    .arg(&owner_text)
                    .arg("r:released")
                    .arg(token_text(latest))
                    .invoke(conn)
                    .unwrap();
                same(left >= 0, expected, &context)?;
            }
            6 => {
                let expected = model.renew_reentrant(latest, now, TTL);
                let renewed: Vec<i64> = scripts
                    .renew
                    .key(REENTRANT)
                    .arg("r")
                    .arg(token_text(latest))
                    .arg(lease_ms)
                    .invoke(conn)
                    .unwrap();
                same(renewed, vec![i64::from(expected)], &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                tick_keys(conn, &[REENTRANT]);
            }
        }
        // The hash against the model's: owner, count, the holds, the fence.
        let fields: Vec<(String, String)> =
            redis::cmd("HGETALL").arg(REENTRANT).query(conn).unwrap();
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
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = reentrant_scripts();
    let mut nested = 0;
    for seed in 0..200 {
        match run_reentrant(seed, &scripts, &mut conn, &[]) {
            Ok(count) => nested += count,
            Err(divergence) => panic!("{divergence}"),
        }
    }
    // The runs reach what they are for: an owner's acquire re-entering its held lock with
    // another hold token (a holder resending its own is no re-entry).
    assert!(nested >= 100, "only {nested} re-entries in 200 runs");
    // The negative control: bugs in the model's reentrant mutex are told apart.
    for mutant in [
        Mutant::ReentrantFreedAtFirstRelease,
        Mutant::ResendCountedTwice,
        Mutant::ResendKeepsOldLease,
    ] {
        let caught =
            (0..200).find_map(|seed| run_reentrant(seed, &scripts, &mut conn, &[mutant]).err());
        assert!(caught.is_some(), "{mutant:?} went unnoticed in 200 runs");
    }
}

const RW: &str = "w";
const RW_FENCE: &str = "w:fence";
const RW_QUEUE: &str = "w:queue";
const RW_LEASES: &str = "w:queue-leases";
const RW_INDEX: &str = "w:read-expiry";
/// The owner of each client's read holds (and of a downgrade's): clients 0 and 2 read for
/// one owner, so one re-enters the other's read hold.
const RW_OWNERS: [u8; 3] = [0, 1, 0];

struct RwScripts {
    read_acquire: LibraryScript,
    read_release: LibraryScript,
    write_acquire: LibraryScript,
    write_release: LibraryScript,
    downgrade: LibraryScript,
    cancel: LibraryScript,
    renew: LibraryScript,
    shift: redis::Script,
    shift_queue: redis::Script,
}

fn rw_scripts() -> RwScripts {
    RwScripts {
        read_acquire: LibraryScript::named("read lock acquire"),
        read_release: LibraryScript::named("read lock release"),
        write_acquire: LibraryScript::named("write lock acquire"),
        write_release: LibraryScript::named("write lock release"),
        downgrade: LibraryScript::named("downgrade"),
        cancel: LibraryScript::named("queue leave"),
        renew: renew_script(),
        shift: redis::Script::new(SHIFT_ENTRIES),
        shift_queue: redis::Script::new(SHIFT_QUEUE),
    }
}

/// The read holds on the server now (live, and how many ended), and the writer.
fn rw_holds(conn: &mut redis::Connection) -> (Vec<String>, usize, Option<String>) {
    let kind: String = redis::cmd("TYPE").arg(RW).query(conn).unwrap();
    match kind.as_str() {
        "string" => (
            Vec::new(),
            0,
            redis::cmd("GET").arg(RW).query(conn).unwrap(),
        ),
        "hash" => {
            let (live, ended) = entries_at(conn, RW);
            (live, ended, None)
        }
        _ => (Vec::new(), 0, None),
    }
}

/// What the rwlock's runs reached.
#[derive(Default)]
struct RwReached {
    /// Write attempts that found ended read holds in the key, which the script purges
    /// before it decides (a write is never granted over ended holds alone here: the hash
    /// expires with its latest lease, so only live ones keep it, and they make it busy).
    purged_for_write: usize,
    /// Releases (a writer's, the last reader's) that handed the write lock to the first
    /// writer in line.
    hand_offs: usize,
    /// A waiting writer's next attempt (its token in line) granted.
    from_line: usize,
    /// Read holds granted to an owner that read already (a new hold token, not a resend).
    reentries: usize,
    /// ... of which while a writer waited in line.
    reentries_past_writer: usize,
    /// Downgrades granted (a write lock turned into a read hold).
    downgrades: usize,
    /// Downgrades refused: the write lock was not the client's.
    downgrades_refused: usize,
}

/// A client's latest hold in a run of the rwlock.
#[derive(Clone, Copy, Default)]
struct RwLatest {
    /// Its token is a write's (else a read hold's).
    write: bool,
    /// A write that waits (takes a place in line when busy).
    join: bool,
    /// The fence of its write grant, the server's and the model's.
    fence: Option<(u64, u64)>,
    /// A read hold made by a downgrade: the writer's token (a resend sends it again).
    downgraded_from: Option<Token>,
}

/// One random run of the read-write lock with its writer queue: three clients take read
/// holds (two of them for one owner, who re-enters) or the write lock (a wait, which takes
/// a place in line, or a single attempt that does not), try again with their token, resend,
/// release (the write lock handed to the first writer in line), leave the line, downgrade
/// a write lock to a read hold (and resend that), renew; the clock ticks. The read holds,
/// the writer, the counter and the live writers in line (in order) are compared after
/// every step.
fn run_rw(
    seed: u64,
    scripts: &RwScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut RwReached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Server::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 3];
    let mut latests = [RwLatest::default(); 3];
    let mut fences = Fences::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    let owner_of = |t: Token| RW_OWNERS[usize::from(t.client)];
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let c = client as usize;
        let owner = RW_OWNERS[c];
        let owner_text = format!("o{owner}");
        let latest = Token {
            client,
            attempt: attempts[c].saturating_sub(1),
        };
        let choice = rng.random_range(0..14);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A new read hold, a new write (a wait or a single attempt), or the latest
            // again (a resend, or a waiting writer's next attempt).
            0..=5 => {
                let (token, this) = if choice <= 2 {
                    attempts[c] += 1;
                    let this = RwLatest {
                        write: choice >= 1,
                        join: choice == 1,
                        ..RwLatest::default()
                    };
                    (latest_after(client, &attempts), this)
                } else if attempts[c] == 0 || latests[c].downgraded_from.is_some() {
                    continue;
                } else {
                    (latest, latests[c])
                };
                latests[c] = this;
                // Ended read holds the write finds in the key, which its script must
                // purge before it decides.
                let finds_ended = this.write && rw_holds(conn).1 > 0;
                let in_line = model.live_waiters(now).any(|t| t == token);
                let waiting = model.live_waiters(now).next().is_some();
                let reading = !this.write
                    && model.holder(now).is_none()
                    && model
                        .live_entries(now)
                        .any(|t| t != token && owner_of(t) == owner)
                    && !model.live_entries(now).any(|t| t == token);
                let (expected, reply): (Grant, Vec<i64>) = if this.write {
                    let expected =
                        model.write_acquire(token, now, TTL, WAITER_LEASE, this.join, mutants);
                    let reply = with_keys(&scripts.write_acquire)
                        .arg(waiter_text(token))
                        .arg(lease_ms)
                        .arg(u64::from(WAITER_LEASE) * TICK_MS)
                        .arg("w:wake:")
                        .arg(if this.join { "1" } else { "0" })
                        .invoke(conn)
                        .unwrap();
                    (expected, reply)
                } else {
                    let expected = model.read_acquire(owner, owner_of, token, now, TTL, mutants);
                    let reply = with_keys(&scripts.read_acquire)
                        .arg(&owner_text)
                        .arg(lease_ms)
                        .arg(token_text(token))
                        .invoke(conn)
                        .unwrap();
                    (expected, reply)
                };
                reached.purged_for_write += usize::from(finds_ended);
                match (reply.as_slice(), expected) {
                    ([1, fence, ..], Grant::Granted(Some(modelled))) => {
                        fences.check(*fence as u64, modelled, &context)?;
                        if this.write {
                            latests[c].fence = Some((*fence as u64, modelled));
                            reached.from_line += usize::from(in_line);
                        } else if reading {
                            reached.reentries += 1;
                            reached.reentries_past_writer += usize::from(waiting);
                        }
                    }
                    ([0, ..], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            6..=8 => {
                let (_, handed) = if latests[c].write {
                    let expected = model.write_release(latest, now, TTL, mutants);
                    let released: i64 = with_keys(&scripts.write_release)
                        .arg(waiter_text(latest))
                        .arg("w:wake:")
                        .arg("w:released")
                        .invoke(conn)
                        .unwrap();
                    same(released == 1, expected.0, &context)?;
                    expected
                } else {
                    let expected = model.read_release(latest, now, TTL, mutants);
                    let released: i64 = with_keys(&scripts.read_release)
                        .arg(token_text(latest))
                        .arg("w:wake:")
                        .invoke(conn)
                        .unwrap();
                    same(released == 1, expected.0, &context)?;
                    expected
                };
                if let Some((writer, fence)) = handed {
                    reached.hand_offs += 1;
                    // The hand-off's fence is the counter now (compared in order).
                    let counter: u64 = redis::cmd("GET").arg(RW_FENCE).query(conn).unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                    // The writer handed the lock is told its fence (its downgrade sends it).
                    let w = usize::from(writer.client);
                    if latests[w].write && latest_after(writer.client, &attempts) == writer {
                        latests[w].fence = Some((counter, fence));
                    }
                }
            }
            9 => {
                if !latests[c].write {
                    continue;
                }
                let line = (RW_QUEUE, RW_LEASES, "w:wake:");
                let text = waiter_text(latest);
                leave_line(conn, &scripts.cancel, line, &text, &mut model, latest, now)
                    .map_err(|e| format!("{context}: {e}"))?;
            }
            // A downgrade of the latest write (held or not: the script checks), or the
            // resend of a downgrade made.
            10 => {
                let this = latests[c];
                let (writer, hold) = match this.downgraded_from {
                    Some(writer) => (writer, latest),
                    None if this.write && attempts[c] > 0 => {
                        attempts[c] += 1;
                        (latest, latest_after(client, &attempts))
                    }
                    None => continue,
                };
                // A writer never granted sends what the guard would not have: no fence.
                let (server_fence, model_fence) = this.fence.unwrap_or((0, 0));
                let expected = model.downgrade(writer, hold, now, TTL, model_fence, mutants);
                let reply: Vec<i64> = with_keys(&scripts.downgrade)
                    .arg(waiter_text(writer))
                    .arg(&owner_text)
                    .arg(lease_ms)
                    .arg(token_text(hold))
                    .arg(server_fence)
                    .arg("w:released")
                    .invoke(conn)
                    .unwrap();
                match (reply.as_slice(), expected) {
                    ([1, fence, _], Some(modelled)) => {
                        fences.check(*fence as u64, modelled, &context)?;
                        reached.downgrades += 1;
                        latests[c] = RwLatest {
                            downgraded_from: Some(writer),
                            ..this
                        };
                    }
                    ([0, -1], None) => {
                        reached.downgrades_refused += 1;
                        if this.downgraded_from.is_none() {
                            attempts[c] -= 1; // no read hold was made: the write is latest
                        }
                    }
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            11 => {
                let (expected, renewed): (bool, Vec<i64>) = if latests[c].write {
                    let expected = model.renew_string(latest, now, TTL);
                    let renewed = scripts
                        .renew
                        .key(RW)
                        .arg("s")
                        .arg(waiter_text(latest))
                        .arg(lease_ms)
                        .invoke(conn)
                        .unwrap();
                    (expected, renewed)
                } else {
                    let expected = model.renew_entry(latest, now, TTL);
                    let renewed = scripts
                        .renew
                        .key(RW)
                        .key(RW_INDEX)
                        .arg("e")
                        .arg(token_text(latest))
                        .arg(lease_ms)
                        .invoke(conn)
                        .unwrap();
                    (expected, renewed)
                };
                // -1: the key holds the other kind (a read hash, a writer's string): not
                // held either.
                same(renewed == [1], expected, &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                let _: () = scripts
                    .shift
                    .key(RW)
                    .key(RW_INDEX)
                    .arg(TICK_MS)
                    .invoke(conn)
                    .unwrap();
                let _: () = scripts
                    .shift_queue
                    .key(RW_QUEUE)
                    .key(RW_LEASES)
                    .arg(TICK_MS)
                    .arg(SLACK_MS)
                    .invoke(conn)
                    .unwrap();
            }
        }
        let (reads, _, writer) = rw_holds(conn);
        let mut modelled: Vec<String> = model.live_entries(now).map(token_text).collect();
        modelled.sort();
        same(reads, modelled, &format!("{context}: read holds"))?;
        same(
            writer,
            model.holder(now).map(waiter_text),
            &format!("{context}: writer"),
        )?;
        fences.check_counter(conn, RW_FENCE, model.counter, &context)?;
        same(
            line_at(conn, RW_QUEUE, RW_LEASES),
            model.live_waiters(now).map(waiter_text).collect::<Vec<_>>(),
            &format!("{context}: the line"),
        )?;
    }
    Ok(())
}

/// A read-write lock script with its keys.
fn with_keys(script: &LibraryScript) -> redis::ScriptInvocation<'_> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(RW)
        .key(RW_FENCE)
        .key(RW_QUEUE)
        .key(RW_LEASES)
        .key(RW_INDEX);
    invocation
}

/// The token of a client's latest attempt, `attempts` counting it.
fn latest_after(client: u8, attempts: &[u8; 3]) -> Token {
    Token {
        client,
        attempt: attempts[client as usize] - 1,
    }
}

#[test]
fn the_rwlock_scripts_do_what_the_model_says() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = rw_scripts();
    let mut reached = RwReached::default();
    for seed in 0..400 {
        if let Err(divergence) = run_rw(seed, &scripts, &mut conn, &[], &mut reached) {
            panic!("{divergence}");
        }
    }
    // The runs reach what they are for: writes that find ended read holds (which the
    // script purges first), hand-offs to the first writer in line, writers granted by
    // their next attempt, owners that re-enter their read hold (also past a waiting
    // writer), downgrades made and refused.
    let RwReached {
        purged_for_write,
        hand_offs,
        from_line,
        reentries,
        reentries_past_writer,
        downgrades,
        downgrades_refused,
    } = reached;
    // (In these runs: 33 purges, 95 hand-offs, 34 grants from the line, 291 re-entries, 110
    // of them past a waiting writer, 107 downgrades and 408 refused.)
    assert!(
        purged_for_write >= 25,
        "only {purged_for_write} writes found ended read holds"
    );
    assert!(hand_offs >= 75, "only {hand_offs} hand-offs in 400 runs");
    assert!(
        from_line >= 25,
        "only {from_line} grants from the line in 400 runs"
    );
    assert!(
        reentries >= 200,
        "only {reentries} read re-entries in 400 runs"
    );
    assert!(
        reentries_past_writer >= 75,
        "only {reentries_past_writer} read re-entries past a waiting writer in 400 runs"
    );
    assert!(downgrades >= 75, "only {downgrades} downgrades in 400 runs");
    assert!(
        downgrades_refused >= 200,
        "only {downgrades_refused} refused downgrades"
    );
    // The negative control: bugs in the model's rwlock are told apart.
    for mutant in [
        Mutant::PurgeForgetsLiveReader,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::ResendKeepsOldLease,
        Mutant::QueueSkipsHead,
        Mutant::QueueKeepsLapsedWaiters,
        Mutant::ReleaseSkipsHandOff,
        Mutant::HandOffReusesFence,
        Mutant::DowngradeWithoutOwnerCheck,
    ] {
        let caught = (0..200).find_map(|seed| {
            let reached = &mut RwReached::default();
            run_rw(seed, &scripts, &mut conn, &[mutant], reached).err()
        });
        assert!(caught.is_some(), "{mutant:?} went unnoticed in 200 runs");
    }
}

const MASTER: &str = "k";
const MASTER_FENCE: &str = "k:fence";

/// A test-local bug in the model's master, for the Redlock run's negative control.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MasterBug {
    /// A raise sets the counter to the fence, lower or not.
    RaiseLowers,
    /// A raise does not check that the hold is the round's.
    RaiseWithoutOwnerCheck,
}

/// `Master::raise`, or the bug in its place.
fn raise_in_model(
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
const AHEAD: u64 = 1_000_000_000;
/// The model's clock moves this much each step: more than a raise "just above" adds, as
/// the server's clock moves more than that (µs) between two steps' scripts.
const MODEL_CLOCK_STEP: u64 = 1_000;

/// What one Redlock run reached.
#[derive(Default, Debug)]
struct RedlockReached {
    clock_fences: usize,
    counter_fences: usize,
    raised: usize,
    refused_not_held: usize,
    not_lowered: usize,
    restarts: usize,
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
fn run_redlock_master(
    seed: u64,
    scripts: &Scripts,
    raise: &LibraryScript,
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
                let reply: Vec<i64> = scripts
                    .acquire
                    .key(MASTER)
                    .key(MASTER_FENCE)
                    .arg(token_text(token))
                    .arg(lease_ms)
                    .arg("1")
                    .arg("1")
                    .invoke(conn)
                    .unwrap();
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
                let counter: Option<u64> = redis::cmd("GET").arg(MASTER_FENCE).query(conn).unwrap();
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
                let raised: i64 = raise
                    .key(MASTER)
                    .key(MASTER_FENCE)
                    .arg(token_text(token))
                    .arg(fence)
                    .invoke(conn)
                    .unwrap();
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
                let released: i64 = scripts
                    .release
                    .key(MASTER)
                    .arg(token_text(latest))
                    .arg("k:released")
                    .invoke(conn)
                    .unwrap();
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
                tick_keys(conn, &[MASTER]);
            }
        }
        let holder: Option<String> = redis::cmd("GET").arg(MASTER).query(conn).unwrap();
        same(
            holder,
            model.holder(now).map(token_text),
            &format!("{context}: holder"),
        )?;
        fences.check_counter(conn, MASTER_FENCE, model.counter, &context)?;
    }
    Ok(())
}

#[test]
fn a_redlock_master_does_what_the_model_says() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let scripts = scripts();
    let raise = LibraryScript::named("redlock fence raise");
    let mut reached = RedlockReached::default();
    for seed in 0..200 {
        if let Err(divergence) =
            run_redlock_master(seed, &scripts, &raise, &mut conn, None, &mut reached)
        {
            panic!("{divergence}");
        }
    }
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
    for bug in [MasterBug::RaiseLowers, MasterBug::RaiseWithoutOwnerCheck] {
        let mut ignored = RedlockReached::default();
        let caught = (0..200).find_map(|seed| {
            run_redlock_master(seed, &scripts, &raise, &mut conn, Some(bug), &mut ignored).err()
        });
        assert!(caught.is_some(), "{bug:?} went unnoticed in 200 runs");
    }
}

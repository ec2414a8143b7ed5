//! What every kind's conformance run shares: the clock on the server (a tick, the slack),
//! the tokens as the library writes them, the fences compared in order, the comparison of
//! a reply or a key, the live entries and the line read back from the server, and the
//! server, run loop and negative control every suite's test goes through.

use dlock_model::scripts::{Server, Token};

use dlock_testkit::RedisServer;

use dlock::__scripts::{HoldKind, LeaveQueue, QueueKeys, Renew, Renewal};

use super::library::{lock_keys, send};

/// A model tick on the server: leases are long, and expiry is applied by the test.
pub const TICK_MS: u64 = 60_000;
pub const TTL: u8 = 2;
/// Real time a run may take (ms): a lease this close to a tick's end ends with the tick.
pub const SLACK_MS: u64 = 5_000;

/// A waiter's lease on its place in line, in ticks (the model's fair mutex uses the same).
pub const WAITER_LEASE: u8 = 2;

pub fn token_text(token: Token) -> String {
    format!("t{}.{}", token.client, token.attempt)
}

/// A hold's lease, as the library is given it.
pub fn lease() -> std::time::Duration {
    std::time::Duration::from_millis(u64::from(TTL) * TICK_MS)
}

/// A fair waiter's token as the library writes it (`QueueKeys::waiter_token`): what a
/// direct grant gives it, its ttl in ms, follows its token. (Any lock's line writes it
/// alike: the token names no key.)
pub fn waiter_text(token: Token) -> String {
    QueueKeys::new(&lock_keys("f")).waiter_token(token_text(token), lease())
}

/// A tick on the server for `keys`: each key's expiry comes a tick closer; a key with at
/// most a tick (and the run's slack) left is deleted, as Redis would expire it within it.
pub fn tick_keys(conn: &mut redis::Connection, keys: &[&str]) {
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

/// The queued kinds' attempts in a random run: how many each of three clients made, and
/// the last one sent (its token and whether it joined the line), so that a step can pick
/// a new wait's first attempt, a single attempt, a resend of the last (as after a lost
/// reply), or a waiter's next attempt with its latest token.
#[derive(Default)]
pub struct Attempts {
    made: [u8; 3],
    last: Option<(Token, bool)>,
}

impl Attempts {
    /// `client`'s latest token (a release, renewal or leave of a hold it may have lost:
    /// the scripts must refuse what is not theirs).
    pub fn latest(&self, client: u8) -> Token {
        Token {
            client,
            attempt: self.made[client as usize].saturating_sub(1),
        }
    }

    /// The attempt for `choice` 0 to 5: 0 or 1 a new wait joining the line, 2 a single
    /// attempt, 3 the last attempt again (`None` before any), 4 or 5 the latest token's
    /// next attempt in line. Recorded as the last.
    pub fn pick(&mut self, choice: u32, client: u8) -> Option<(Token, bool)> {
        let picked = match choice {
            0..=2 => {
                let token = Token {
                    client,
                    attempt: self.made[client as usize],
                };
                self.made[client as usize] += 1;
                (token, choice != 2)
            }
            3 => self.last?,
            _ => (self.latest(client), true),
        };
        self.last = Some(picked);
        Some(picked)
    }
}

/// The fences seen, the server's beside the model's: the server's are the clock floor (µs),
/// the model's a plain count, so they must agree in order and in equality, not in value.
#[derive(Default)]
pub struct Fences(Vec<(u64, u64)>);

impl Fences {
    pub fn check(&mut self, server: u64, model: u64, context: &str) -> Result<(), String> {
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
    pub fn check_counter(
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

pub fn same<T: PartialEq + std::fmt::Debug>(
    server: T,
    model: T,
    context: &str,
) -> Result<(), String> {
    if server == model {
        Ok(())
    } else {
        Err(format!(
            "{context}: the script says {server:?}, the model {model:?}"
        ))
    }
}

/// renew/renew.lua, as every kind sends it, for the one hold written `token` of `kind` at
/// `key`: `[1]` when it held.
pub fn renew(
    key: &str,
    kind: HoldKind,
    token: &str,
    lease_ms: u64,
    conn: &mut redis::Connection,
) -> Vec<i64> {
    let hold = [Renewal {
        key,
        kind,
        token,
        lease_ms,
    }];
    send(&Renew { holds: &hold }, conn)
}

/// The library's name for the model's form of a hold (the same code on both sides).
pub fn hold_kind(form: dlock_model::admin::Form) -> HoldKind {
    use dlock_model::admin::Form;
    let kind = match form {
        Form::String => HoldKind::String,
        Form::Reentrant => HoldKind::Reentrant,
        Form::Entry => HoldKind::Entry,
    };
    assert_eq!(kind.code(), form.code());
    kind
}

/// A tick on the server for a hash of leased entries (the semaphore's permits, the
/// rwlock's read holds; a writer's string is left as it is): every entry's end, its index
/// score, '~ends' and the keys' expiry move a tick earlier (entries.lua's format), so the
/// scripts' own `end <= now` decides what expired.
pub const SHIFT_ENTRIES: &str = r#"
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

/// A tick on the server for the fair mutex: every waiter lease ends a tick earlier (its
/// score), and every key's expiry comes a tick closer; a key with at most a tick left (and
/// the run's slack) is deleted, as Redis would expire it within that tick.
pub const SHIFT_QUEUE: &str = r#"
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

/// The entries of the hash at `key` (entries.lua's `h:<token>` = `<end>|...`), by the
/// server's clock and their ends: the live ones' tokens, sorted, and how many ended.
pub fn entries_at(conn: &mut redis::Connection, key: &str) -> (Vec<String>, usize) {
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

/// The waiters in the line at `queue` whose waiter lease (at `leases`) has not ended, by
/// the server's clock, in arrival order.
pub fn line_at(conn: &mut redis::Connection, queue: &str, leases: &str) -> Vec<String> {
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

/// queue/cancel.lua (a waiter leaves the `line`, as the library names its keys) beside
/// the model's `queue_cancel`. Their answers (whether it was in line) are compared for a
/// waiter whose waiter lease had not ended: a lapsed one the script finds until another
/// script purges it, while the model forgets a line all of whose leases ended (`expire`);
/// what is left in line is compared after the step either way.
pub fn leave_line(
    conn: &mut redis::Connection,
    line: &QueueKeys,
    text: &str,
    model: &mut Server,
    token: Token,
    now: u8,
) -> Result<(), String> {
    let was_live = line_at(conn, &line.queue, &line.leases)
        .iter()
        .any(|w| w == text);
    let modelled_live = model.live_waiters(now).any(|t| t == token);
    let expected = model.queue_cancel(token);
    let leave = LeaveQueue {
        queue: line,
        token: text,
    };
    let left: i64 = send(&leave, conn);
    same(was_live, modelled_live, "in line before it left")?;
    if modelled_live {
        same(left == 1, expected, "left the line")?;
    }
    Ok(())
}

/// A redis-server of the test kit and a connection to it: a suite's test runs its seeds and
/// its negative controls on one.
pub struct Bench {
    /// Kept for the connection's life (the server stops when dropped).
    _server: RedisServer,
    /// The connection every run uses.
    pub conn: redis::Connection,
}

impl Bench {
    /// Starts a server and connects to it.
    pub fn start() -> Bench {
        let server = RedisServer::start();
        let conn = server.connection();
        Bench {
            _server: server,
            conn,
        }
    }

    /// Runs seeds `0..runs` through `run`, the scripts beside the model: the first
    /// divergence fails the test. Returns what each run reached.
    pub fn conforms<R>(
        &mut self,
        runs: u64,
        mut run: impl FnMut(u64, &mut redis::Connection) -> Result<R, String>,
    ) -> Vec<R> {
        (0..runs)
            .map(|seed| match run(seed, &mut self.conn) {
                Ok(reached) => reached,
                Err(divergence) => panic!("{divergence}"),
            })
            .collect()
    }

    /// The negative control: each of `bugs`, put into the model (or the test's stand-in for
    /// it), is told apart from the scripts within seeds `0..runs`.
    pub fn tells_apart<B: Copy + std::fmt::Debug, R>(
        &mut self,
        bugs: &[B],
        runs: u64,
        mut run: impl FnMut(u64, &mut redis::Connection, B) -> Result<R, String>,
    ) {
        for &bug in bugs {
            let caught = (0..runs).find_map(|seed| run(seed, &mut self.conn, bug).err());
            assert!(caught.is_some(), "{bug:?} went unnoticed in {runs} runs");
        }
    }

    /// The negative control, counted: each of `bugs` is told apart from the scripts in at
    /// least `least` of seeds `0..runs` (a bug the runs reach only by chance fails).
    pub fn tells_apart_often<B: Copy + std::fmt::Debug, R>(
        &mut self,
        bugs: &[B],
        runs: u64,
        least: usize,
        mut run: impl FnMut(u64, &mut redis::Connection, B) -> Result<R, String>,
    ) {
        for &bug in bugs {
            let caught = (0..runs)
                .filter(|&seed| run(seed, &mut self.conn, bug).is_err())
                .count();
            eprintln!("{bug:?} told apart in {caught} of {runs} runs");
            assert!(
                caught >= least,
                "{bug:?} told apart in only {caught} of {runs} runs"
            );
        }
    }
}

//! Distinct names are distinct locks: two names that look alike (`N` and `{N}`, `N` and
//! `{N}:data`, `{N}:x` and `{N}`, names with colons and braces, behind prefixes) share no
//! key, companion or channel. For every kind, one lock is filled (holders, a queued
//! waiter, guarded data, a leader record), a full cycle of every kind runs on the other,
//! and the first must be exactly as it was: every key's value, and its waiter still
//! waiting. On c242e66 `acct` and `{acct}` shared their fence, queues, expiry index,
//! guarded data and channels, and `{t}`'s guarded key `fence` was `{t}:data`'s fence.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{take, Held, Kind, KINDS};
use dlock::{Client, Guarded, LockOptions, Wait};
use dlock_testkit::RedisServer;
use proptest::prelude::*;

/// Long leases and waiter leases, no renewal: nothing of the filled lock changes by
/// itself while the other one cycles.
fn still() -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_secs(60))
        .waiter_lease(Duration::from_secs(60))
        .wait(Wait::Forever)
}

/// Every key of the database: its value (`DUMP`, without the expiry) and its expiry
/// (`PTTL`, -1 for none).
fn snapshot(server: &RedisServer) -> BTreeMap<Vec<u8>, (Vec<u8>, i64)> {
    let keys: Vec<Vec<u8>> = server.cmd(&["KEYS", "*"]);
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    keys.into_iter()
        .map(|key| {
            let value: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut connection).unwrap();
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut connection).unwrap();
            (key, (value, pttl))
        })
        .collect()
}

/// The snapshot once the filled lock has settled: a queued waiter subscribes after the
/// attempt that queued it, then looks once more (which renews its place's lease), so the
/// database is read until it stays the same for 100 ms.
async fn settled(server: &RedisServer) -> BTreeMap<Vec<u8>, (Vec<u8>, i64)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = snapshot(server);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = snapshot(server);
        let values = |s: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>| {
            s.values().map(|v| v.0.clone()).collect::<Vec<_>>()
        };
        if now.keys().eq(last.keys()) && values(&now) == values(&last) {
            return now;
        }
        assert!(Instant::now() < deadline, "the filled lock never settled");
        last = now;
    }
}

/// Whether `kind` queues its waiters in Redis (a waiter then has a place to disturb).
fn queues(kind: Kind) -> bool {
    matches!(kind, Kind::Fair | Kind::Write | Kind::Permit)
}

/// The writes a holder of `kind` makes on its lock's data: `fence` is `{t}:data`'s fence
/// key under the old naming when the lock is `{t}`.
fn writes(mark: &str) -> Guarded {
    Guarded::new()
        .set("fence", "9007199254740991")
        .set("balance", mark)
        .incr_by("n", 1)
}

/// A lock of `kind` on `name`, filled: its holders (both permits of a semaphore), a
/// waiter queued behind them where the kind queues, guarded data, and the fence drawn.
struct Filled {
    holds: Vec<Held>,
    waiter: Option<tokio::task::JoinHandle<dlock::Result<Held>>>,
}

async fn fill(client: &Client, kind: Kind, name: &str) -> Filled {
    let mut holds = vec![take(client, kind, name, still(), true).await.unwrap()];
    if kind == Kind::Permit || kind == Kind::Read {
        holds.push(take(client, kind, name, still(), true).await.unwrap());
    }
    for hold in &holds {
        hold.fence().await.unwrap();
        hold.apply(&writes("100")).await.unwrap();
    }
    let waiter = if queues(kind) {
        let (other, owned) = (client.clone(), name.to_string());
        let waiter = tokio::spawn(async move { take(&other, kind, &owned, still(), false).await });
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.inspect(name).await.unwrap().queued == 0 {
            assert!(
                Instant::now() < deadline,
                "{kind:?} {name}: the waiter never queued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Some(waiter)
    } else {
        None
    };
    Filled { holds, waiter }
}

impl Filled {
    /// Gives everything back: the waiter's wait is dropped (its place given back), then
    /// the holds are released.
    async fn empty(self) {
        if let Some(waiter) = self.waiter {
            waiter.abort();
            let _ = waiter.await;
        }
        for hold in self.holds {
            hold.unlock().await.unwrap();
        }
    }
}

/// A whole life of `kind` on `name`: taken, fenced, guarded writes, an election's record
/// where the kind is the plain mutex, released.
async fn cycle(client: &Client, kind: Kind, name: &str) {
    let hold = take(client, kind, name, still().wait(Wait::NoWait), true)
        .await
        .unwrap_or_else(|err| panic!("{kind:?} on {name}: {err}"));
    hold.fence().await.unwrap();
    hold.apply(&writes("0")).await.unwrap();
    hold.unlock().await.unwrap();
    if kind == Kind::Mutex {
        let election = client.election_with(name, still()).unwrap();
        let leadership = election.campaign("b").await.unwrap();
        leadership.resign().await.unwrap();
    }
}

/// Fills `filled` with every kind in turn (and an election), cycles every kind on
/// `other`, and checks the filled lock is untouched. `Err` names what changed.
async fn untouched(
    server: &RedisServer,
    client: &Client,
    filled: &str,
    other: &str,
) -> Result<(), String> {
    for kind in KINDS {
        let _: () = server.cmd(&["FLUSHALL"]);
        let lock = fill(client, kind, filled).await;
        let label = format!("{kind:?} {filled:?}");
        compare(server, client, &label, other, lock.waiter.is_some()).await?;
        if let Some(waiter) = &lock.waiter {
            if waiter.is_finished() {
                return Err(format!(
                    "{kind:?} {filled:?}: the waiter was granted by a cycle on {other:?}"
                ));
            }
        }
        lock.empty().await;
    }
    // An election: its leader record and term, and the leader's guarded data.
    let _: () = server.cmd(&["FLUSHALL"]);
    let election = client.election_with(filled, still()).unwrap();
    let leadership = election.campaign("a").await.unwrap();
    leadership.apply(&writes("100")).await.unwrap();
    compare(
        server,
        client,
        &format!("election {filled:?}"),
        other,
        false,
    )
    .await?;
    leadership.resign().await.unwrap();
    Ok(())
}

/// Cycles every kind on `other` and checks that no key that existed before changed.
async fn compare(
    server: &RedisServer,
    client: &Client,
    filled: &str,
    other: &str,
    waiting: bool,
) -> Result<(), String> {
    let before = if waiting {
        settled(server).await
    } else {
        snapshot(server)
    };
    for kind in KINDS {
        cycle(client, kind, other).await;
    }
    let after = snapshot(server);
    for (key, (value, pttl)) in &before {
        let key_name = String::from_utf8_lossy(key);
        let Some((value_after, pttl_after)) = after.get(key) else {
            return Err(format!(
                "{filled}: key {key_name} deleted by a cycle on {other:?}"
            ));
        };
        if value_after != value {
            return Err(format!(
                "{filled}: key {key_name} changed by a cycle on {other:?}: {:?} -> {:?}",
                String::from_utf8_lossy(value),
                String::from_utf8_lossy(value_after),
            ));
        }
        // An expiry only runs down: one moved later (or set, or removed) was touched.
        if (*pttl == -1) != (*pttl_after == -1) || *pttl_after > *pttl {
            return Err(format!(
                "{filled}: the expiry of {key_name} changed by a cycle on {other:?}: {pttl} ms -> {pttl_after} ms"
            ));
        }
    }
    Ok(())
}

/// How many shapes [`look_alike`] knows.
const SHAPES: u8 = 8;

/// A look-alike of `base`, by shape (the pairs and their mirrors).
fn look_alike(base: &str, shape: u8) -> (String, String) {
    let (a, b) = match shape % SHAPES {
        0 => (base.to_string(), format!("{{{base}}}")),
        1 => (base.to_string(), format!("{{{base}}}:data")),
        2 => (format!("{{{base}}}:x"), format!("{{{base}}}")),
        3 => (format!("{base}}}"), format!("{{{base}}}}}")),
        4 => (format!("{{{base}}}"), format!("{{{base}}}:data")),
        5 => (format!("a:{base}"), format!("a:{{{base}}}")),
        6 => (format!("{{{base}}}:q"), format!("{{{base}}}:queue:q")),
        _ => (format!("x{{{base}}}"), format!("{{{base}}}x")),
    };
    (a, b)
}

/// The prefixes the pairs are tried behind (a name that is refused behind one is
/// skipped there: `N}` needs a tagged prefix).
const PREFIXES: [&str; 3] = ["", "app:", "{app}:"];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Every shape of look-alike behind every prefix, both ways round, for one base name.
#[test]
fn every_look_alike_shape_behind_every_prefix_is_a_separate_lock() {
    let server = RedisServer::start();
    let runtime = runtime();
    runtime.block_on(async {
        for prefix in PREFIXES {
            let client = Client::builder(&server.url())
                .prefix(prefix)
                .connect()
                .await
                .unwrap();
            for shape in 0..SHAPES {
                let (a, b) = look_alike("n", shape);
                if client.mutex(&a).is_err() || client.mutex(&b).is_err() {
                    continue; // refused names are no locks
                }
                for (filled, other) in [(&a, &b), (&b, &a)] {
                    if let Err(err) = untouched(&server, &client, filled, other).await {
                        panic!("prefix {prefix:?}: {err}");
                    }
                }
            }
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Random bases (with colons, braces, slashes, digits and non-ASCII) in a random
    /// shape behind a random prefix: the filled lock is untouched by every kind's cycle on
    /// the other.
    #[test]
    fn look_alike_names_never_touch_each_other(
        base in "[a-z0-9:/{}é]{1,6}",
        shape in 0u8..SHAPES,
        prefix in 0usize..PREFIXES.len(),
    ) {
        let server = RedisServer::start();
        let runtime = runtime();
        let (a, b) = look_alike(&base, shape);
        let outcome = runtime.block_on(async {
            let client = Client::builder(&server.url())
                .prefix(PREFIXES[prefix])
                .connect()
                .await
                .unwrap();
            if a == b || client.mutex(&a).is_err() || client.mutex(&b).is_err() {
                return Ok(()); // refused names are no locks
            }
            untouched(&server, &client, &a, &b).await?;
            untouched(&server, &client, &b, &a).await
        });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

/// The reproductions, named, both ways round.
#[test]
fn the_reported_look_alikes_are_separate_locks() {
    let server = RedisServer::start();
    let runtime = runtime();
    let pairs = [
        ("acct", "{acct}"),
        ("s", "{s}"),
        ("acct2", "{acct2}"),
        ("{t}", "{t}:data"),
        ("acct", "{acct}:data"),
        ("{acct}:x", "{acct}"),
    ];
    runtime.block_on(async {
        let client = Client::connect(&server.url()).await.unwrap();
        for (a, b) in pairs {
            for (filled, other) in [(a, b), (b, a)] {
                if let Err(err) = untouched(&server, &client, filled, other).await {
                    panic!("{err}");
                }
            }
        }
    });
}

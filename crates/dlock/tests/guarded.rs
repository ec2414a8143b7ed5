//! Guarded writes: commands on data beside a lock take effect only while the hold is held,
//! for every kind on one server; a paused holder's late write is refused by Redis itself;
//! a batch resent after a lost reply is applied once (see also resend.rs); bad batches are
//! refused before anything is sent.

use std::sync::Arc;
use std::time::Duration;

use dlock::redis::Value;
use dlock::{AnyLock, Client, Error, Guarded, LockOptions, LostReason, Owner, Wait};
use dlock_testkit::{IndependentMasters, RedisServer};

/// A fixed lease of `ttl` (no renewal), no waiting.
fn fixed(ttl: Duration) -> LockOptions {
    LockOptions::default().ttl(ttl).wait(Wait::NoWait)
}

/// The holder paused past its lease (no renewal: a stop-the-world pause looks the same to
/// Redis) writes late, after another holder took the lock and wrote: Redis refuses the
/// late write, the successor's value stands, and the paused holder's lost signal fires.
/// The negative control sends the same late write unguarded, as a holder without guarded
/// writes would, and the check sees the successor's value overwritten.
#[tokio::test]
async fn a_paused_holders_late_write_is_refused_by_redis() {
    let server = RedisServer::start();
    let a = Client::connect(&server.url()).await.unwrap();
    let b = Client::connect(&server.url()).await.unwrap();
    let short = fixed(Duration::from_millis(300));
    let paused = a
        .mutex_with("account", short)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    paused
        .apply(&Guarded::new().set("owner", "a"))
        .await
        .unwrap();
    let key = paused.data_key("owner");
    assert_eq!(key, "{account}:data:owner");

    tokio::time::sleep(Duration::from_millis(500)).await; // the pause
    let successor = b
        .mutex_with("account", short)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    successor
        .apply(&Guarded::new().set("owner", "b"))
        .await
        .unwrap();

    let late = paused.apply(&Guarded::new().set("owner", "a-late")).await;
    assert!(matches!(late, Err(Error::Lost { .. })), "{late:?}");
    assert_eq!(paused.lost_signal().lost(), Some(LostReason::Taken));
    let survived = |server: &RedisServer| server.cmd::<String>(&["GET", &key]) == "b";
    assert!(survived(&server), "the late write landed");

    // Negative control: the same late write without the hold check.
    let _: () = server.cmd(&["SET", &key, "a-late"]);
    assert!(!survived(&server), "the check cannot see a late write");
}

/// The handles of every kind on one server, each its own name, as AnyLock.
fn every_kind(client: &Client, options: LockOptions) -> Vec<AnyLock> {
    vec![
        client.mutex_with("g-mutex", options).unwrap().into(),
        client.fair_mutex_with("g-fair", options).unwrap().into(),
        client
            .reentrant_mutex_with("g-reentrant", options)
            .unwrap()
            .for_owner(&Owner::new())
            .into(),
        client.rwlock_with("g-rw", options).unwrap().reader().into(),
        client
            .rwlock_with("g-rw2", options)
            .unwrap()
            .writer()
            .into(),
        client.semaphore_with("g-sem", 3, options).unwrap().into(),
    ]
}

/// Every kind applies a batch while held, answers each command's reply, and refuses a
/// batch once its hold is given back (by token, as `dlock guarded` sends it), leaving the
/// data as it was.
#[tokio::test]
async fn every_kind_applies_while_held_and_refuses_after() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for lock in every_kind(&client, fixed(Duration::from_secs(20))) {
        let kind = lock.kind();
        let guard = lock.try_lock().await.unwrap();
        let replies = guard
            .apply(
                &Guarded::new()
                    .set("a", "1")
                    .incr_by("a", 2)
                    .hset("h", "f", "v")
                    .hget("h", "f")
                    .get("missing"),
            )
            .await
            .unwrap_or_else(|err| panic!("{kind}: {err}"));
        assert_eq!(
            replies,
            [
                Value::Okay,
                Value::Int(3),
                Value::Int(1),
                Value::BulkString(b"v".to_vec()),
                Value::Nil
            ],
            "{kind}"
        );
        // An empty batch only checks the hold.
        assert!(guard.apply(&Guarded::new()).await.unwrap().is_empty());
        let token = guard.token().to_string();
        let by_token = lock
            .apply_token(&token, &Guarded::new().incr_by("a", 1))
            .await
            .unwrap();
        assert_eq!(by_token, [Value::Int(4)], "{kind}");
        guard.unlock().await.unwrap();

        let after = lock
            .apply_token(&token, &Guarded::new().set("a", "late"))
            .await;
        assert!(
            matches!(after, Err(Error::Lost { .. })),
            "{kind}: {after:?}"
        );
        let a: String = server.cmd(&["GET", &lock.data_key("a")]);
        assert_eq!(a, "4", "{kind}: a refused batch changed the data");
    }
}

/// Another kind holding the name now: nothing is applied; by token the error names the
/// kind found (the token may be of another kind: pass its kind), through a guard the
/// hold is lost.
#[tokio::test]
async fn a_token_of_one_kind_is_not_held_under_another() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("clash", fixed(Duration::from_millis(300)))
        .unwrap();
    let guard = mutex.try_lock().await.unwrap();
    let token = guard.token().to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _permit = client
        .semaphore_with("clash", 2, fixed(Duration::from_secs(20)))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let by_token = mutex
        .apply_token(&token, &Guarded::new().set("x", "1"))
        .await;
    assert!(
        matches!(by_token, Err(Error::WrongType { .. })),
        "{by_token:?}"
    );
    let by_guard = guard.apply(&Guarded::new().set("x", "1")).await;
    assert!(matches!(by_guard, Err(Error::Lost { .. })), "{by_guard:?}");
    assert_eq!(guard.lost_signal().lost(), Some(LostReason::Taken));
    let exists: i64 = server.cmd(&["EXISTS", &mutex.data_key("x")]);
    assert_eq!(exists, 0);
}

/// Bad batches: a command outside the list, an empty key; a command Redis refuses in the
/// middle of a batch names itself, the commands before it stay applied (Redis has no
/// rollback) and those after it do not run.
#[tokio::test]
async fn bad_batches_are_refused_with_what_went_wrong() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client
        .mutex_with("bad", fixed(Duration::from_secs(20)))
        .unwrap();
    let guard = lock.try_lock().await.unwrap();
    let calls_before = server.total_calls();
    for batch in [
        Guarded::new().command("FLUSHALL", "x", &[] as &[&str]),
        Guarded::new().command("RENAME", "a", "b"),
        Guarded::new().set("", "1"),
        // Further arguments of DEL, UNLINK and EXISTS would be keys outside the data.
        Guarded::new().command("DEL", "a", "victim"),
        Guarded::new().command("EXISTS", "a", ("b", "c")),
        // More than Lua's stack passes on.
        Guarded::new().command("RPUSH", "list", vec!["x"; dlock::MAX_GUARDED_ARGS + 1]),
    ] {
        let refused = guard.apply(&batch).await;
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    // Nothing was sent (the count includes this INFO).
    assert!(server.total_calls() <= calls_before + 1);

    let refused = guard
        .apply(
            &Guarded::new()
                .set("text", "abc")
                .incr_by("text", 1)
                .set("after", "1"),
        )
        .await;
    let Err(Error::Refused { command, reason }) = &refused else {
        panic!("{refused:?}");
    };
    assert!(
        command.contains("INCRBY on {bad}:data:text (command 2 of 3"),
        "{command}"
    );
    assert!(reason.contains("not an integer"), "{reason}");
    let text: String = server.cmd(&["GET", &guard.data_key("text")]);
    assert_eq!(text, "abc");
    let after: i64 = server.cmd(&["EXISTS", &guard.data_key("after")]);
    assert_eq!(after, 0);
    assert!(
        guard.is_held().await.unwrap(),
        "a refused command ends no hold"
    );

    // Lower-case names are the same commands.
    let replies = guard
        .apply(&Guarded::new().command("strlen", "text", &[] as &[&str]))
        .await
        .unwrap();
    assert_eq!(replies, [Value::Int(3)]);
}

/// A holder keeps one record of its latest batch, which expires: batches leave nothing
/// behind that grows.
#[tokio::test]
async fn a_holder_keeps_one_expiring_record() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client
        .mutex_with("rec", fixed(Duration::from_secs(20)))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    for _ in 0..50 {
        guard.apply(&Guarded::new().incr_by("n", 1)).await.unwrap();
    }
    let keys: Vec<String> = server.cmd(&["KEYS", "{rec}:applied:*"]);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = server.cmd(&["PTTL", &keys[0]]);
    assert!(ttl > 0 && ttl <= 20_000, "{ttl}");

    // A batch of reads alone writes nothing: no record (so it also runs on a server at
    // maxmemory); a batch with a write does.
    let reader = client
        .mutex_with("reads", fixed(Duration::from_secs(20)))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let replies = reader
        .apply(&Guarded::new().get("n").command("LLEN", "l", &[] as &[&str]))
        .await
        .unwrap();
    assert_eq!(replies, [Value::Nil, Value::Int(0)]);
    let keys: Vec<String> = server.cmd(&["KEYS", "{reads}:*"]);
    assert!(keys.is_empty(), "a read batch wrote {keys:?}");
    reader.apply(&Guarded::new().incr_by("n", 1)).await.unwrap();
    let keys: Vec<String> = server.cmd(&["KEYS", "{reads}:applied:*"]);
    assert_eq!(keys.len(), 1, "a write batch keeps its record");
}

/// Many tasks of two clients increment one counter with a guarded read, then a guarded
/// write, under the lock: no increment is lost. The negative control runs the same
/// increments with the lock taken by nobody (each task reads and writes the data keys
/// directly, interleaved): increments are lost, so the count can catch a broken lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_read_modify_write_under_contention_loses_nothing() {
    let server = RedisServer::start();
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::Timeout(Duration::from_secs(60)));
    let clients = [
        Client::connect(&server.url()).await.unwrap(),
        Client::connect(&server.url()).await.unwrap(),
    ];
    const TASKS: usize = 16;
    const ROUNDS: usize = 10;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let lock = clients[task % 2].mutex_with("counter", options).unwrap();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                let read = guard.apply(&Guarded::new().get("n")).await.unwrap();
                let n: i64 = dlock::redis::from_redis_value::<Option<i64>>(read[0].clone())
                    .unwrap()
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                guard.apply(&Guarded::new().set("n", n + 1)).await.unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let n: i64 = server.cmd(&["GET", "{counter}:data:n"]);
    assert_eq!(n, (TASKS * ROUNDS) as i64);

    // Negative control: the same read-modify-write without the lock.
    let conn = Arc::new(clients[0].connection().await.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mut conn = (*conn).clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let n: Option<i64> = dlock::redis::cmd("GET")
                    .arg("unlocked")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: () = dlock::redis::cmd("SET")
                    .arg("unlocked")
                    .arg(n.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let unlocked: i64 = server.cmd(&["GET", "unlocked"]);
    assert!(
        unlocked < (TASKS * ROUNDS) as i64,
        "the unlocked increments lost nothing ({unlocked}): the check cannot catch a lost update"
    );
}

/// A Redlock hold spans several masters: no one script can check it, so guarded writes
/// are refused with a reason, before anything is sent.
#[tokio::test]
async fn redlock_refuses_guarded_writes() {
    let masters = IndependentMasters::start(3);
    let redlock = Client::redlock(masters.urls()).await.unwrap();
    let mutex = redlock
        .mutex_with("red", fixed(Duration::from_secs(10)))
        .unwrap();
    let guard = mutex.try_lock().await.unwrap();
    let refused = guard.apply(&Guarded::new().set("x", "1")).await;
    let Err(Error::InvalidArgument(reason)) = &refused else {
        panic!("{refused:?}");
    };
    assert!(reason.contains("Redlock"), "{reason}");
    guard.unlock().await.unwrap();
    redlock.shutdown().await;
}

/// The blocking API has the same verbs.
#[test]
fn the_blocking_api_applies_too() {
    let server = RedisServer::start();
    let client = dlock::blocking::Client::connect(&server.url()).unwrap();
    let lock = client
        .mutex_with("blocking", fixed(Duration::from_secs(10)))
        .unwrap();
    let guard = lock.try_lock().unwrap();
    let replies = guard.apply(&Guarded::new().incr_by("n", 7)).unwrap();
    assert_eq!(replies, [Value::Int(7)]);
    assert_eq!(guard.data_key("n"), lock.data_key("n"));
    let token = guard.into_token();
    assert_eq!(
        lock.apply_token(&token, &Guarded::new().incr_by("n", 1))
            .unwrap(),
        [Value::Int(8)]
    );
    lock.release_token(&token).unwrap();
    assert!(matches!(
        lock.apply_token(&token, &Guarded::new().incr_by("n", 1)),
        Err(Error::Lost { .. })
    ));
}

/// The proxy of `a_batch_is_not_resent_after_its_record_expired`: its reply filter (a plain
/// `fn`) stalls it the moment it swallows the batch's reply.
static SLOW_RECONNECT: std::sync::OnceLock<dlock_testkit::Proxy> = std::sync::OnceLock::new();

/// The reply swallowed there: a batch of one `INCRBY n 1000` on a fresh key, applied
/// (`{1, {1000}}`), whole or its last piece. Swallowing it closes the batch's connection;
/// the proxy is stalled at once, so the client's reconnection (and any resend) waits until
/// it is resumed.
fn swallow_and_stall(reply: &[u8]) -> bool {
    // The reply's end: Redis 7 writes `*2\r\n:1\r\n*1\r\n:1000\r\n` at once, Redis 6.2 in
    // three writes (`*2`, `:1 *1`, `:1000`), so the proxy reads it in pieces. Swallowing
    // the last piece loses the reply with its connection just the same.
    let matched = reply.ends_with(b":1000\r\n");
    if matched {
        SLOW_RECONNECT.get().unwrap().pause();
    }
    matched
}

/// A batch whose reply is lost with its connection is resent only if the connection is
/// back while Redis still keeps the batch's record (a lease from the first send): a resend
/// after that finds no record, and would apply the batch a second time if the hold still
/// holds (or answer "not held" though it applied). Here the reconnection takes twice the
/// lease, so `apply` fails with `Error::Connection` (the outcome unknown), and the batch
/// stays applied once. The guarded writes' model found it (`dlock-model`,
/// `a_resend_after_the_record_expired_applies_again`); review found the first fix checked
/// the deadline before the reconnection, which this test's stalled reconnect catches. The
/// negative control sends the same batch again by hand after its record is gone, as the
/// late resend did, and the check sees it applied twice.
#[tokio::test]
async fn a_batch_is_not_resent_after_its_record_expired() {
    let server = RedisServer::start();
    let proxy = SLOW_RECONNECT.get_or_init(|| dlock_testkit::Proxy::start(server.port()));
    let client = Client::connect(&proxy.url()).await.unwrap();
    let guard = client
        .mutex_with("acct", fixed(Duration::from_millis(300)))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    // The hold outlives the slow reconnect (as a renewal on another connection would
    // keep it): without it, the late resend would answer "not held" instead.
    let _: i64 = server.cmd(&["PEXPIRE", "acct", "60000"]);
    // The script is loaded first, so the batch below is one EVALSHA and its reply the
    // first the proxy sees.
    guard
        .apply(&Guarded::new().incr_by("warm", 1))
        .await
        .unwrap();
    proxy.drop_next_replies_where(1, swallow_and_stall);
    let resume = std::thread::spawn(|| {
        let proxy = SLOW_RECONNECT.get().unwrap();
        // Bounded: a reply the matcher did not recognise (e.g. split across reads) is not
        // swallowed, and the test must then fail below, not wait here forever.
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while proxy.dropped() == 0 && std::time::Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(600)); // twice the record's lease
        proxy.resume();
    });
    let applied = guard.apply(&Guarded::new().incr_by("n", 1000)).await;
    resume.join().unwrap();
    // No reply swallowed: the matcher stops counting, so no later test's reply is eaten.
    proxy.drop_next_replies(0);
    assert_eq!(proxy.dropped(), 1, "the reply was not lost: {applied:?}");
    let key = guard.data_key("n");
    let value = || server.cmd::<String>(&["GET", &key]);
    assert_eq!(value(), "1000", "applied twice ({applied:?})");
    assert!(matches!(applied, Err(Error::Connection(_))), "{applied:?}");

    // Negative control: the late resend by hand, the record gone as it would be by then.
    let script = dlock::__library_scripts()
        .into_iter()
        .find(|script| script.name == "guarded apply")
        .unwrap();
    let record = format!("{{acct}}:applied:{}", guard.token());
    let resend = || {
        let _: Value = redis::Script::new(&script.code)
            .key("acct")
            .key(&record)
            .key(&key)
            .arg("s")
            .arg(guard.token())
            .arg("the-batch")
            .arg(60_000)
            .arg(1)
            .arg("INCRBY")
            .arg(1)
            .arg(1000)
            .invoke(&mut server.connection())
            .unwrap();
    };
    resend();
    resend(); // within the record's life: answered from it
    assert_eq!(value(), "2000");
    let _: i64 = server.cmd(&["DEL", &record]);
    resend(); // after it
    assert_eq!(
        value(),
        "3000",
        "the check cannot see a batch applied twice"
    );
}

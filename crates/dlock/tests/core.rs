//! The shared core at the edges real programs hit: cancelled waits, lost replies, resent
//! acquires, Redis refusing, kinds mixed on one name, state that must die with its
//! holders, shutdown. Each test would fail on a core that patched these per primitive.

mod common;

use std::time::{Duration, Instant};

use common::{lock_keys, script, take, Held, Kind, KINDS};
use dlock::{Client, Error, LockOptions, LostReason, Owner, Wait};
use dlock_testkit::{Proxy, RedisServer};

fn waiting(timeout: Duration) -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Timeout(timeout))
}

/// Takes and gives back `kind` once, so its scripts are loaded before a fault is armed.
async fn warm_up(client: &Client, kind: Kind, name: &str) {
    let held = take(client, kind, name, waiting(Duration::from_secs(1)), true);
    held.await.unwrap().unlock().await.unwrap();
}

fn exists(server: &RedisServer, keys: &[String]) -> i64 {
    let mut args = vec!["EXISTS"];
    args.extend(keys.iter().map(String::as_str));
    server.cmd(&args)
}

/// A client through `proxy` that gives up on a reply after 2 s (a lost reply is then a
/// timeout, not a hang).
async fn proxied_client(proxy: &Proxy) -> Client {
    Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap()
}

/// Waits until none of `keys` exists; false if some still do after `within`.
async fn all_gone(server: &RedisServer, keys: &[String], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if exists(server, keys) == 0 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cancelled_while_redis_is_paused_leaves_nothing_behind() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(150))
        .connect()
        .await
        .unwrap();
    for kind in KINDS {
        let name = format!("cancel-{kind:?}");
        // Load the scripts first, so the paused request is the acquire itself.
        warm_up(&client, kind, &name).await;
        let _: () = server.cmd(&["CLIENT", "PAUSE", "600", "ALL"]);
        let cancelled = tokio::time::timeout(
            Duration::from_millis(350),
            take(
                &client,
                kind,
                &name,
                waiting(Duration::from_secs(60)),
                false,
            ),
        )
        .await;
        assert!(cancelled.is_err(), "{kind:?}: the wait was cancelled");
        // After the pause the queued acquire runs (and is granted); the give-back sent
        // behind it on the same connection then releases it.
        assert!(
            all_gone(&server, &lock_keys(&name), Duration::from_secs(5)).await,
            "{kind:?}: the cancelled wait left the lock held"
        );
    }

    // Negative control: the same acquire sent during a pause and abandoned without
    // dlock's give-back leaves the lock held, and the check above sees it.
    let mut raw = common::raw_conn(&server).await;
    let acquire = script(&["mutex/bare.lua", "mutex/acquire.lua"]);
    let _: Vec<i64> = acquire
        .key("control")
        .key("{control}:fence")
        .arg("warm-up")
        .arg(10)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let _: () = server.cmd(&["CLIENT", "PAUSE", "300", "ALL"]);
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        acquire
            .key("control")
            .key("{control}:fence")
            .arg("orphan")
            .arg(30_000)
            .invoke_async::<Vec<i64>>(&mut raw),
    )
    .await;
    assert!(abandoned.is_err());
    assert!(
        !all_gone(&server, &lock_keys("control"), Duration::from_secs(1)).await,
        "without a give-back the orphan token keeps the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_reply_never_leaves_a_guard_on_a_free_lock() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = proxied_client(&proxy).await;
    for kind in KINDS {
        // 4: for the plain mutex, whose attempt resends its `SET NX` and then its slow
        // path, the first attempt fails and the wait's retry with the same token wins.
        for lost in [1, 2, 4] {
            let name = format!("lost-{kind:?}-{lost}");
            let options = LockOptions::default()
                .ttl(Duration::from_secs(20))
                .wait(Wait::Timeout(Duration::from_secs(10)));
            warm_up(&client, kind, &name).await;
            // The acquire runs but its reply is lost with the connection (once: the
            // resend on the new connection answers; twice: the wait retries).
            proxy.drop_next_replies_where(lost, is_grant);
            let held = take(&client, kind, &name, options, false).await.unwrap();
            assert!(proxy.dropped() > 0);
            // Any clean-up racing the retry would free the lock under the guard.
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(
                is_held(&held).await,
                "{kind:?}, {lost} lost: the guard's lock is free"
            );
            let pttl: i64 = server.cmd(&["PTTL", &name]);
            assert!(
                pttl > 19_000,
                "{kind:?}: the resend restarted the lease ({pttl} ms left)"
            );
            held.unlock().await.unwrap();
            proxy.drop_next_replies(0);
        }
    }

    // A single attempt whose replies are all lost reports the connection problem and
    // gives back what it may have been granted.
    for kind in KINDS {
        let name = format!("lost-try-{kind:?}");
        warm_up(&client, kind, &name).await;
        // Every grant reply is lost: the attempt, its resend, and (for the plain mutex,
        // whose resent `SET NX` finds the key taken) the slow path and its resend.
        proxy.drop_next_replies_where(10, is_grant);
        let result = take(&client, kind, &name, waiting(Duration::from_secs(1)), true).await;
        assert!(
            matches!(result, Err(Error::Connection(_))),
            "{kind:?}: {result:?}"
        );
        proxy.drop_next_replies(0);
        assert!(
            all_gone(&server, &lock_keys(&name), Duration::from_secs(5)).await,
            "{kind:?}: the possibly granted lock was not given back"
        );
    }
}

/// The mutex with its fence drawn at grant answers a grant as the bare fence (a clock-floor
/// fence: sixteen digits): a lost one is resent and recognised (the same fence, the lease
/// restarted), and a single attempt whose every grant reply is lost gives the key back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_fenced_grant_reply_is_recognised_or_given_back() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = proxied_client(&proxy).await;
    let is_fence = |reply: &[u8]| reply.starts_with(b":") && reply.len() > 12;
    let options = LockOptions::default()
        .ttl(Duration::from_secs(20))
        .fence_at_grant();
    for lost in [1, 2] {
        let name = format!("lost-fenced-{lost}");
        let mutex = client
            .mutex_with(&name, options.wait(Wait::Timeout(Duration::from_secs(10))))
            .unwrap();
        mutex.try_lock().await.unwrap().unlock().await.unwrap();
        let before = proxy.dropped();
        proxy.drop_next_replies_where(lost, is_fence);
        let guard = mutex.lock().await.unwrap();
        assert_eq!(
            proxy.dropped() - before,
            lost,
            "the grant replies were lost"
        );
        let counter: u64 = server.cmd(&["GET", &format!("{{{name}}}:fence")]);
        assert_eq!(
            guard.drawn_fence(),
            Some(counter),
            "{lost} lost: one fence drawn"
        );
        assert!(
            guard.is_held().await.unwrap(),
            "{lost} lost: the lock is free"
        );
        let pttl: i64 = server.cmd(&["PTTL", &name]);
        assert!(
            pttl > 19_000,
            "{lost} lost: the lease restarted ({pttl} ms left)"
        );
        guard.unlock().await.unwrap();
        proxy.drop_next_replies(0);
    }
    let name = "lost-fenced-all";
    let mutex = client.mutex_with(name, options.wait(Wait::NoWait)).unwrap();
    mutex.try_lock().await.unwrap().unlock().await.unwrap();
    proxy.drop_next_replies_where(10, is_fence);
    let result = mutex.try_lock().await;
    assert!(matches!(result, Err(Error::Connection(_))), "{result:?}");
    proxy.drop_next_replies(0);
    assert!(
        all_gone(&server, &[name.to_string()], Duration::from_secs(5)).await,
        "the possibly granted fenced lock was not given back"
    );
}

/// The reply of an acquire script that granted: `{1, fence}` or `{1, fence, holds}`.
fn is_grant(reply: &[u8]) -> bool {
    reply.starts_with(b"*2\r\n:1\r\n:")
        || reply.starts_with(b"*3\r\n:1\r\n:")
        // The plain mutex: its fast path's `SET NX`, or its slow path granting.
        || reply == b"+OK\r\n"
        || reply == b"*1\r\n:1\r\n"
}

async fn is_held(held: &Held) -> bool {
    match held {
        Held::Mutex(g) => g.is_held().await.unwrap(),
        Held::Reentrant(g) => g.is_held().await.unwrap(),
        Held::Read(g) => g.is_held().await.unwrap(),
        Held::Write(g) => g.is_held().await.unwrap(),
        Held::Permit(g) => g.is_held().await.unwrap(),
    }
}

/// Every acquire script, and how to call it with `token` for a 1 s lease (the waiter
/// lease 10 s, joining the queue where there is one).
fn acquire_call(kind: Kind, token: &str) -> redis::ScriptInvocation<'static> {
    const QUEUED: &[&str] = common::RW_KEYS;
    const FAIR: &[&str] = &["k", "{k}:fence", "{k}:queue", "{k}:queue-leases"];
    let (files, keys, args): (&[&str], &[&str], Vec<String>) = match kind {
        Kind::Mutex => (
            &["mutex/bare.lua", "mutex/acquire.lua"],
            &["k"],
            vec![token.into(), "1000".into()],
        ),
        Kind::Reentrant => (
            &["reentrant/acquire.lua"],
            &["k", "{k}:fence"],
            vec!["owner".into(), "1000".into(), token.into()],
        ),
        Kind::Read => (
            &[
                "queue/queue.lua",
                "lua/entries.lua",
                "rwlock/rwlock.lua",
                "rwlock/read_acquire.lua",
            ],
            QUEUED,
            vec!["owner".into(), "1000".into(), token.into()],
        ),
        Kind::Fair | Kind::Write => (
            if kind == Kind::Fair {
                &["queue/queue.lua", "mutex/fair_acquire.lua"]
            } else {
                &[
                    "queue/queue.lua",
                    "lua/entries.lua",
                    "rwlock/rwlock.lua",
                    "rwlock/write_acquire.lua",
                ]
            },
            if kind == Kind::Fair { FAIR } else { QUEUED },
            vec![
                token.into(),
                "1000".into(),
                "10000".into(),
                "{k}:wake:".into(),
                "1".into(),
            ],
        ),
        Kind::Permit => (
            &[
                "queue/queue.lua",
                "lua/entries.lua",
                "semaphore/permits.lua",
                "semaphore/acquire.lua",
            ],
            QUEUED,
            vec![
                token.into(),
                "1000".into(),
                "2".into(),
                "10000".into(),
                "{k}:wake:".into(),
                "1".into(),
            ],
        ),
    };
    let script: &'static redis::Script = Box::leak(Box::new(script(files)));
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    for arg in args {
        call.arg(arg);
    }
    call
}

/// The lease left on `token`'s hold: the key's PTTL, and for leased entries also the
/// entry's own end.
fn lease_left(server: &RedisServer, kind: Kind, token: &str) -> i64 {
    let pttl: i64 = server.cmd(&["PTTL", "k"]);
    if matches!(kind, Kind::Read | Kind::Permit) {
        let entry: String = server.cmd(&["HGET", "k", &format!("h:{token}")]);
        let ends: i64 = entry.split('|').next().unwrap().parse().unwrap();
        let (secs, micros): (i64, i64) = server.cmd(&["TIME"]);
        return pttl.min(ends - (secs * 1000 + micros / 1000));
    }
    pttl
}

#[tokio::test]
async fn a_resent_acquire_restarts_the_whole_lease_for_every_kind() {
    let server = RedisServer::start();
    let mut conn = common::raw_conn(&server).await;
    for kind in KINDS {
        let _: () = server.cmd(&["FLUSHALL"]);
        // The plain mutex's first attempt is its fast path, a bare `SET NX PX`; the resend
        // finds the key taken and runs the slow-path script.
        let first: Vec<i64> = if kind == Kind::Mutex {
            let set: Option<String> = server.cmd(&["SET", "k", "tok", "NX", "PX", "1000"]);
            assert_eq!(set.as_deref(), Some("OK"));
            vec![1]
        } else {
            acquire_call(kind, "tok")
                .invoke_async(&mut conn)
                .await
                .unwrap()
        };
        assert_eq!(first[0], 1, "{kind:?}: granted");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let resent: Vec<i64> = acquire_call(kind, "tok")
            .invoke_async(&mut conn)
            .await
            .unwrap();
        let same = first.len().min(2);
        assert_eq!(
            resent[..same],
            first[..same],
            "{kind:?}: same grant, same fence"
        );
        if let (Some(a), Some(b)) = (first.get(2), resent.get(2)) {
            assert_eq!(a, b, "{kind:?}: a resend is not counted twice");
        }
        let left = lease_left(&server, kind, "tok");
        assert!(
            left > 900,
            "{kind:?}: {left} ms left after the resend, not the full lease"
        );
        let fence: Option<i64> = server.cmd(&["GET", "{k}:fence"]);
        let expected = match kind {
            Kind::Mutex => None,
            _ => first.get(1).copied(),
        };
        assert_eq!(fence, expected, "{kind:?}: the resend drew no second fence");
    }
}

#[tokio::test]
async fn refusals_carry_the_servers_words() {
    // ACL: a user that may not touch the key.
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL",
        "SETUSER",
        "limited",
        "on",
        ">pw",
        "~allowed:*",
        "~{allowed:*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://limited:pw@127.0.0.1:{}", server.port());
    let client = Client::connect(&url).await.unwrap();
    for kind in KINDS {
        match take(
            &client,
            kind,
            "forbidden",
            waiting(Duration::from_secs(1)),
            false,
        )
        .await
        {
            Err(Error::Refused { reason, .. }) => assert!(reason.starts_with("NOPERM"), "{reason}"),
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    take(
        &client,
        Kind::Mutex,
        "allowed:job",
        waiting(Duration::from_secs(1)),
        true,
    )
    .await
    .unwrap()
    .unlock()
    .await
    .unwrap();

    // OOM: maxmemory reached with noeviction. Nothing is granted and the key is untouched.
    let client = Client::connect(&server.url()).await.unwrap();
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    for kind in KINDS {
        let name = format!("oom-{kind:?}");
        match take(&client, kind, &name, waiting(Duration::from_secs(1)), false).await {
            Err(error @ Error::Refused { .. }) => {
                let text = error.to_string();
                // The server's words from their code on, on every server (Redis 6.2 puts
                // where the script met them before them: `answer` in lua/answer.lua).
                let Error::Refused { reason, .. } = &error else {
                    unreachable!()
                };
                assert!(reason.starts_with("OOM command not allowed"), "{reason}");
                assert!(
                    !text.contains("fence") && !text.contains("remove"),
                    "{text}"
                );
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(exists(&server, &lock_keys(&name)), 0);
    }
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);

    // READONLY: a replica.
    let replica = RedisServer::start();
    let port = server.port().to_string();
    let _: () = replica.cmd(&["REPLICAOF", "127.0.0.1", &port]);
    let client = Client::connect(&replica.url()).await.unwrap();
    for kind in KINDS {
        match take(&client, kind, "job", waiting(Duration::from_secs(1)), false).await {
            Err(Error::Refused { reason, .. }) => {
                assert!(reason.starts_with("READONLY"), "{reason}")
            }
            other => panic!("{kind:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn wrong_types_are_reported_without_destructive_advice() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let _: () = server.cmd(&["RPUSH", "queue-of-jobs", "a"]);
    for kind in KINDS {
        match take(
            &client,
            kind,
            "queue-of-jobs",
            waiting(Duration::from_secs(1)),
            false,
        )
        .await
        {
            Err(Error::WrongType { key, what }) => {
                assert_eq!(key, "queue-of-jobs");
                assert!(what.contains("list"), "{what}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    // A fencing counter that is not a number: named, and no advice to delete it (that
    // would restart fencing tokens at zero).
    let _: () = server.cmd(&["SET", "{job}:fence", "not-a-number"]);
    for kind in KINDS {
        let taken = take(&client, kind, "job", waiting(Duration::from_secs(1)), false).await;
        // The plain mutex draws its fence on first read: granted, and the read fails.
        let drawn = match taken {
            Ok(held) if kind == Kind::Mutex => {
                let drawn = held.fence().await;
                held.unlock().await.unwrap();
                drawn.map(|_| ())
            }
            other => other.map(|_| ()),
        };
        match drawn {
            Err(error @ Error::WrongType { .. }) => {
                let text = error.to_string();
                assert!(
                    text.contains("{job}:fence") && text.contains("counter"),
                    "{text}"
                );
                assert!(
                    !text.contains("remove") && !text.contains("delete"),
                    "{text}"
                );
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(
            exists(&server, &lock_keys("job")),
            0,
            "{kind:?}: nothing granted"
        );
    }
}

#[tokio::test]
async fn any_two_kinds_on_one_name_exclude_each_other() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let single = waiting(Duration::from_secs(1));
    let mut pairs = 0;
    for first in KINDS {
        for second in KINDS {
            if first == second {
                continue; // same-kind exclusion is each primitive's own test
            }
            let _: () = server.cmd(&["FLUSHALL"]);
            let held = take(&client, first, "shared", single, true).await.unwrap();
            let other = take(&client, second, "shared", single, true).await;
            match other {
                Err(Error::Busy { .. } | Error::WrongType { .. }) => {}
                other => panic!("{first:?} held, then {second:?}: {other:?}"),
            }
            // Another client's plain SET NX lock cannot get in either.
            let foreign: Option<String> =
                server.cmd(&["SET", "shared", "foreign", "NX", "PX", "10000"]);
            assert_eq!(foreign, None, "{first:?} held: a foreign SET NX got in");
            held.unlock().await.unwrap();
            pairs += 1;
        }
        // A foreign SET NX lock keeps every kind out.
        let _: () = server.cmd(&["FLUSHALL"]);
        let _: () = server.cmd(&["SET", "shared", "foreign", "PX", "10000"]);
        match take(&client, first, "shared", single, true).await {
            Err(Error::Busy { .. } | Error::WrongType { .. }) => {}
            other => panic!("foreign lock held, then {first:?}: {other:?}"),
        }
    }
    assert_eq!(pairs, 30);
}

#[tokio::test]
async fn negative_control_one_kind_does_take_a_free_name() {
    // The matrix above would pass vacuously if no kind could ever be taken.
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for kind in KINDS {
        let held = take(&client, kind, "free", waiting(Duration::from_secs(1)), true)
            .await
            .unwrap();
        held.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_reused_owner_id_after_expiry_starts_from_one_hold() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let short = LockOptions::default()
        .ttl(Duration::from_millis(200))
        .wait(Wait::NoWait);
    let owner = Owner::from_id("service-a");
    let lock = client.rwlock_with("config", short).unwrap();
    let _abandoned = lock
        .for_owner(&owner)
        .try_read()
        .await
        .unwrap()
        .into_token();
    let reentrant = client.reentrant_mutex_with("ledger", short).unwrap();
    let _abandoned = reentrant
        .for_owner(&owner)
        .try_lock()
        .await
        .unwrap()
        .into_token();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Everything of the expired holders went with their keys.
    assert_eq!(exists(&server, &["config".into(), "ledger".into()]), 0);

    let read = lock.for_owner(&owner).try_read().await.unwrap();
    assert_eq!(
        read.holds_at_grant(),
        1,
        "no holds inherited from the expired reader"
    );
    read.unlock().await.unwrap();
    lock.try_write()
        .await
        .expect("free at once")
        .unlock()
        .await
        .unwrap();

    let again = reentrant.for_owner(&owner).try_lock().await.unwrap();
    assert_eq!(again.holds_at_grant(), 1);
    again.unlock().await.unwrap();
    assert_eq!(reentrant.for_owner(&owner).hold_count().await.unwrap(), 0);
}

#[tokio::test]
async fn shutdown_releases_every_live_guard() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default()
        .renewed(Duration::from_secs(30))
        .wait(Wait::Timeout(Duration::from_secs(5)));
    let mut held = Vec::new();
    let mut names = Vec::new();
    for kind in KINDS {
        let name = format!("shutdown-{kind:?}");
        held.push(take(&client, kind, &name, options, false).await.unwrap());
        names.extend(lock_keys(&name));
    }
    let waiter = tokio::spawn({
        let client = client.clone();
        async move { take(&client, Kind::Mutex, "shutdown-Mutex", options, false).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Each kind's lock key, and the expiry index beside the read holds and the permits.
    assert_eq!(exists(&server, &names), 8);

    client.shutdown().await;
    assert_eq!(exists(&server, &names), 0, "every lock was released");
    for hold in held {
        assert_eq!(hold.lost_signal().lost(), Some(LostReason::Released));
        assert!(matches!(hold.unlock().await, Err(Error::Lost { .. })));
    }
    assert!(matches!(waiter.await.unwrap(), Err(Error::Closed)));
    assert!(matches!(
        client.mutex("after").unwrap().lock().await,
        Err(Error::Closed)
    ));
    assert_eq!(exists(&server, &["after".into()]), 0);
}

#[tokio::test]
async fn a_live_waiter_does_not_poll_while_notifications_flow() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with(
            "quiet",
            LockOptions::default()
                .ttl(Duration::from_secs(30))
                .wait(Wait::Timeout(Duration::from_secs(20))),
        )
        .unwrap();
    let holder = mutex.try_lock().await.unwrap();
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = server.total_calls();
    assert!(calls <= 1, "{calls} commands while waiting quietly");
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken by the release, not by the lease"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn inputs_that_used_to_panic_get_typed_errors_or_saturate() {
    let server = RedisServer::start();
    assert!(matches!(
        Client::builder(&server.url())
            .connect_timeout(Duration::MAX)
            .connect()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::builder(&server.url())
            .response_timeout(Duration::MAX)
            .connect()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    let client = Client::connect(&server.url()).await.unwrap();
    assert!(matches!(
        client.mutex_with(
            "x",
            LockOptions::default().backoff(Duration::MAX, Duration::MAX)
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.mutex_with(
            "x",
            LockOptions::default().wait(Wait::Timeout(Duration::MAX))
        ),
        Err(Error::InvalidArgument(_))
    ));
    // A cap too long to represent is no cap: granted, renewed, released normally.
    let mutex = client
        .mutex_with(
            "capped",
            LockOptions::default()
                .renewed(Duration::from_secs(1))
                .max_hold(Duration::MAX),
        )
        .unwrap();
    let guard = mutex.lock().await.unwrap();
    assert!(guard.is_held().await.unwrap());
    guard.unlock().await.unwrap();
    assert_eq!(exists(&server, &lock_keys("capped")), 0);
}

#[test]
fn bad_tls_files_are_rejected_before_connecting() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let result = Client::builder("rediss://127.0.0.1:1")
            .tls_root_certificate(b"not a certificate".to_vec())
            .connect()
            .await;
        match result {
            Err(Error::InvalidArgument(text)) => assert!(text.contains("CA"), "{text}"),
            other => panic!("{other:?}"),
        }
    });
}

#[tokio::test]
async fn a_tls_handshake_against_a_plain_port_fails_fast_and_says_tls() {
    let server = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let started = Instant::now();
    let result = Client::builder(&url)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await;
    match result {
        Err(error @ Error::Misconfigured(_)) => {
            assert!(error.to_string().contains("TLS"), "{error}");
            assert!(!error.is_transient(), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

/// A reentrant owner's `release_one` whose reply is lost: the resend on the new connection
/// must not give back a second hold (before the fix it did, and the owner, with two
/// guards, held nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_release_one_reply_gives_back_one_hold_only() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = proxied_client(&proxy).await;
    let mutex = client
        .reentrant_mutex_with("twice", waiting(Duration::from_secs(1)))
        .unwrap();
    let owner = Owner::new();
    let (outer, inner) = (
        mutex.for_owner(&owner).lock().await.unwrap(),
        mutex.for_owner(&owner).lock().await.unwrap(),
    );
    assert_eq!(mutex.for_owner(&owner).release_one().await.unwrap(), 1); // warms the script up
    let again = mutex.for_owner(&owner).lock().await.unwrap();
    assert_eq!(mutex.for_owner(&owner).hold_count().await.unwrap(), 2);
    // The release script's reply (`:1`, the holds left) is lost with its connection.
    proxy.drop_next_replies_where(1, |reply| reply == b":1\r\n");
    let left = mutex.for_owner(&owner).release_one().await;
    assert_eq!(proxy.dropped(), 1, "the reply was not lost: {left:?}");
    assert_eq!(
        mutex.for_owner(&owner).hold_count().await.unwrap(),
        1,
        "one release_one gave back two holds"
    );
    for guard in [outer, inner, again] {
        let _ = guard.unlock().await;
    }
    assert_eq!(mutex.for_owner(&owner).hold_count().await.unwrap(), 0);
}

/// An operator's forced release whose reply is lost: the first run evicted the holder
/// and woke the waiter, who got the lock; the resend must not evict the waiter too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_forced_release_reply_evicts_nobody_else() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let operator = Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let users = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Timeout(Duration::from_secs(20)));
    let mutex = users.mutex_with("forced", options).unwrap();
    let evicted = mutex.try_lock().await.unwrap();
    assert_eq!(operator.force_release("nothing-here").await.unwrap(), None); // warm-up
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    // The waiter is subscribed (it subscribes after its first busy attempt), so the release
    // wakes it at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server
        .cmd::<Vec<String>>(&["PUBSUB", "CHANNELS", "*forced*"])
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The reply is lost with its connection, and the reconnection's replies are slow: the
    // woken waiter takes the lock before the resend runs.
    proxy.delay_replies(Duration::from_millis(400));
    proxy.drop_next_replies(1);
    let fence = operator.force_release("forced").await.unwrap();
    assert_eq!(proxy.dropped(), 1);
    proxy.delay_replies(Duration::ZERO);
    assert!(fence.is_some());
    let granted = waiter.await.unwrap().unwrap();
    assert!(
        granted.is_held().await.unwrap(),
        "the resent forced release evicted the waiter it let in"
    );
    assert!(matches!(evicted.unlock().await, Err(Error::Lost { .. })));
    granted.unlock().await.unwrap();
}

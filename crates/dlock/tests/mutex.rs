//! Mutex behaviour against real redis-server processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
mod common;

use dlock_testkit::{RedisServer, ServerOptions};

fn opts(ttl_ms: u64, wait: Wait) -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(wait)
}

/// A deliberately non-atomic read-modify-write on a Redis counter, with a yield between
/// read and write so that concurrent holders would lose updates.
async fn unsafe_increment(conn: &mut redis::aio::MultiplexedConnection, key: &str) {
    let value: i64 = redis::cmd("GET")
        .arg(key)
        .query_async::<Option<i64>>(conn)
        .await
        .unwrap()
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_micros(200)).await;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value + 1)
        .query_async(conn)
        .await
        .unwrap();
}

/// 32 tasks over 4 clients; returns the final counter.
async fn hammer(server: &RedisServer, locked: bool) -> i64 {
    const TASKS: usize = 32;
    const ITERATIONS: usize = 15;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(Client::connect(&server.url()).await.unwrap());
    }
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let client = clients[task % clients.len()].clone();
        let mut conn = common::raw_conn(server).await;
        handles.push(tokio::spawn(async move {
            let mutex = client.mutex("counter-lock").unwrap();
            for _ in 0..ITERATIONS {
                if locked {
                    let guard = mutex.lock().await.unwrap();
                    unsafe_increment(&mut conn, "counter").await;
                    guard.unlock().await.unwrap();
                } else {
                    unsafe_increment(&mut conn, "counter").await;
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let total: i64 = server.cmd(&["GET", "counter"]);
    assert!(total <= (TASKS * ITERATIONS) as i64);
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_under_the_lock_never_lose_an_update() {
    let server = RedisServer::start();
    assert_eq!(hammer(&server, true).await, 32 * 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn negative_control_without_the_lock_updates_are_lost() {
    // Proves the counter check above can fail: the same work unlocked loses updates.
    let server = RedisServer::start();
    assert!(hammer(&server, false).await < 32 * 15);
}

#[tokio::test]
async fn try_lock_reports_busy_with_the_holders_remaining_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("job", opts(10_000, Wait::NoWait))
        .unwrap();
    let guard = mutex.try_lock().await.unwrap();
    match mutex.try_lock().await {
        Err(Error::Busy { name, remaining }) => {
            assert_eq!(name, "job");
            let remaining = remaining.expect("the lock has an expiry");
            assert!(remaining > Duration::from_secs(5) && remaining <= Duration::from_secs(10));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        matches!(mutex.lock().await, Err(Error::Busy { .. })),
        "NoWait lock() is one attempt"
    );
    assert!(guard.is_held().await.unwrap());
    assert!(guard.valid_until() <= Instant::now() + Duration::from_secs(10));
    // `<client tag>.<random>`: 8 and 32 hex digits.
    let (tag, random) = guard.token().split_once('.').expect("a client tag");
    assert!(tag.len() == 8 && random.len() == 32, "{}", guard.token());
    guard.unlock().await.unwrap();
    let stored: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(stored, None);
}

#[tokio::test]
async fn lock_times_out_with_a_distinct_error() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client
        .mutex_with("job", opts(10_000, Wait::NoWait))
        .unwrap();
    let _guard = holder.try_lock().await.unwrap();
    let waiter = client
        .mutex_with(
            "job",
            opts(10_000, Wait::Timeout(Duration::from_millis(300))),
        )
        .unwrap();
    let started = Instant::now();
    match waiter.lock().await {
        Err(Error::TimedOut { waited, .. }) => assert!(waited >= Duration::from_millis(300)),
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn release_wakes_a_waiter_without_polling() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client
        .mutex_with("job", opts(30_000, Wait::NoWait))
        .unwrap();
    let guard = holder.try_lock().await.unwrap();
    // Polling every 20 s and a 30 s lease: only the release notification can get the
    // waiter in within its 10 s budget.
    let waiter = client
        .mutex_with(
            "job",
            opts(30_000, Wait::Timeout(Duration::from_secs(10)))
                .backoff(Duration::from_secs(20), Duration::from_secs(20)),
        )
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fence = guard.fence().await.unwrap();
    guard.unlock().await.unwrap();
    let next = waiting.await.unwrap().expect("woken by the release");
    assert!(next.fence().await.unwrap() > fence);
}

#[tokio::test]
async fn an_abandoned_lock_is_taken_when_its_lease_ends() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client.mutex_with("job", opts(800, Wait::NoWait)).unwrap();
    // A holder that vanished without releasing: its token is forgotten, nothing releases.
    let _token = holder.try_lock().await.unwrap().into_token();
    let waiter = client
        .mutex_with(
            "job",
            opts(5_000, Wait::Timeout(Duration::from_secs(8)))
                .backoff(Duration::from_secs(20), Duration::from_secs(20)),
        )
        .unwrap();
    // With 20 s polling, getting the lock within 8 s shows the sleep was capped by the
    // holder's remaining lease.
    let guard = waiter.lock().await.expect("taken after the lease ran out");
    assert!(guard.is_held().await.unwrap());
}

#[tokio::test]
async fn waiters_fall_back_to_polling_when_notifications_break() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client
        .mutex_with("job", opts(30_000, Wait::NoWait))
        .unwrap();
    let guard = holder.try_lock().await.unwrap();
    let waiter = client
        .mutex_with(
            "job",
            opts(30_000, Wait::Timeout(Duration::from_secs(10)))
                .backoff(Duration::from_millis(20), Duration::from_millis(200)),
        )
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Cut the subscriber connection, then delete the key without any announcement.
    let fence = guard.fence().await.unwrap();
    let _: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let _: i64 = server.cmd(&["DEL", "job"]);
    let next = waiting
        .await
        .unwrap()
        .expect("found by polling or on resubscribe");
    assert!(next.fence().await.unwrap() > fence);
}

#[tokio::test]
async fn only_the_owner_releases_or_extends() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("job", opts(10_000, Wait::NoWait))
        .unwrap();
    let mut guard = mutex.try_lock().await.unwrap();
    let stranger = "0".repeat(32);
    assert!(matches!(
        mutex.release_token(&stranger).await,
        Err(Error::Lost { .. })
    ));
    assert!(matches!(
        mutex.extend_token(&stranger, Duration::from_secs(60)).await,
        Err(Error::Lost { .. })
    ));
    let stored: String = server.cmd(&["GET", "job"]);
    assert_eq!(stored, guard.token(), "the key is intact");
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(
        pttl <= 10_000,
        "a stranger's extend did not touch the lease"
    );

    guard.extend(Duration::from_secs(60)).await.unwrap();
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(pttl > 50_000, "the owner's extend did");
    assert!(guard.remaining() > Duration::from_secs(50));
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_late_release_reports_lost_and_leaves_the_new_holder_alone() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let short = client.mutex_with("job", opts(100, Wait::NoWait)).unwrap();
    let mut late = short.try_lock().await.unwrap();
    let late_fence = late.fence().await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(late.remaining(), Duration::ZERO);
    let new_holder = client
        .mutex_with("job", opts(10_000, Wait::NoWait))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(!late.is_held().await.unwrap());
    assert!(matches!(
        late.extend(Duration::from_secs(5)).await,
        Err(Error::Lost { .. })
    ));
    // The late holder keeps the fence it drew while it held.
    assert_eq!(late.fence().await.unwrap(), late_fence);
    assert!(matches!(late.unlock().await, Err(Error::Lost { .. })));
    let stored: String = server.cmd(&["GET", "job"]);
    assert_eq!(stored, new_holder.token());
    assert!(new_holder.fence().await.unwrap() > late_fence);
}

#[tokio::test]
async fn a_fence_is_drawn_only_while_held_and_orders_grants() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", opts(100, Wait::NoWait)).unwrap();
    // Drawn on first read, then the same on every read.
    let first = mutex.try_lock().await.unwrap();
    assert_eq!(first.drawn_fence(), None);
    let fence = first.fence().await.unwrap();
    assert_eq!(first.fence().await.unwrap(), fence);
    assert_eq!(first.drawn_fence(), Some(fence));
    first.unlock().await.unwrap();
    // A holder that never read its fence while holding cannot draw one after losing
    // the lock: that would be a fence newer than the next holder's.
    let stale = mutex.try_lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let next = mutex.try_lock().await.unwrap();
    let next_fence = next.fence().await.unwrap();
    assert!(next_fence > fence);
    assert!(matches!(stale.fence().await, Err(Error::Lost { .. })));
    assert_eq!(stale.lost_signal().lost(), Some(dlock::LostReason::Taken));
    let counter: u64 = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(counter, next_fence, "the refused draw counted nothing");
}

#[tokio::test]
async fn dropping_a_guard_releases_in_the_background() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("job", opts(30_000, Wait::NoWait))
        .unwrap();
    drop(mutex.try_lock().await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<Option<String>>(&["GET", "job"]).is_some() {
        assert!(Instant::now() < deadline, "drop did not release");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn dropping_a_guard_after_its_runtime_shut_down_does_not_panic() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let guard = runtime.block_on(async {
        let client = Client::connect(&server.url()).await.unwrap();
        client
            .mutex_with("job", opts(1_000, Wait::NoWait))
            .unwrap()
            .try_lock()
            .await
            .unwrap()
    });
    drop(runtime);
    drop(guard); // nothing to run the release on: the lease frees the lock
    std::thread::sleep(Duration::from_millis(1_100));
    let stored: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(stored, None);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_grants_and_expiry() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("job", opts(50, Wait::Timeout(Duration::from_secs(5))))
        .unwrap();
    let mut last = 0;
    for round in 0..20 {
        let guard = mutex.lock().await.unwrap();
        assert!(
            guard.fence().await.unwrap() > last,
            "round {round}: {} after {last}",
            guard.fence().await.unwrap()
        );
        last = guard.fence().await.unwrap();
        if round % 2 == 0 {
            guard.unlock().await.unwrap();
        } else {
            let _ = guard.into_token(); // left to expire
        }
    }
    assert_eq!(mutex.last_fence().await.unwrap(), last);
}

/// The last fence before a restart, the counter the server has after it (before any
/// grant), and the first fence after it.
async fn fence_after_restart(options: ServerOptions) -> (u64, Option<u64>, u64) {
    let mut server = RedisServer::start_with(options);
    let before = {
        let client = Client::connect(&server.url()).await.unwrap();
        let mutex = client.mutex_with("job", opts(1_000, Wait::NoWait)).unwrap();
        let mut fence = 0;
        for _ in 0..5 {
            let guard = mutex.try_lock().await.unwrap();
            fence = guard.fence().await.unwrap();
            guard.unlock().await.unwrap();
        }
        fence
    };
    server.restart();
    let counter: Option<u64> = server.cmd(&["GET", "{job}:fence"]);
    let client = Client::connect(&server.url()).await.unwrap();
    let after = client
        .mutex_with("job", opts(1_000, Wait::NoWait))
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .fence()
        .await
        .unwrap();
    (before, counter, after)
}

#[tokio::test]
async fn fencing_tokens_survive_a_kill_9_restart_with_aof_always() {
    let (before, counter, after) = fence_after_restart(ServerOptions::durable()).await;
    assert_eq!(counter, Some(before), "AOF always kept the counter");
    assert!(after > before, "fence went from {before} to {after}");
}

#[tokio::test]
async fn fencing_tokens_survive_a_restart_without_persistence_by_the_clock_floor() {
    let (before, counter, after) = fence_after_restart(ServerOptions::default()).await;
    // The negative control: the server forgot the counter, so a fence drawn from it
    // alone (counter + 1 = 1) would have gone backwards.
    assert_eq!(
        counter, None,
        "the restart kept the counter: nothing was tested"
    );
    assert!(1 <= before);
    // The clock floor keeps the fence growing.
    assert!(after > before, "fence went from {before} to {after}");
}

#[tokio::test]
async fn scripts_recover_from_script_flush_and_server_restart() {
    let mut server = RedisServer::start_with(ServerOptions::durable());
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("job", opts(10_000, Wait::Timeout(Duration::from_secs(10))))
        .unwrap();
    let guard = mutex.lock().await.unwrap();
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
    guard.unlock().await.expect("release reloads its script");
    let guard = mutex.lock().await.expect("acquire reloads its script");
    let fence = guard.fence().await.unwrap();
    guard.unlock().await.unwrap();

    server.restart();
    // The first request may meet the dropped connection; lock() retries within its budget.
    let guard = mutex.lock().await.expect("client recovers after restart");
    assert!(guard.fence().await.unwrap() > fence);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn interoperates_with_plain_set_nx_px_locks() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("shared", opts(10_000, Wait::NoWait))
        .unwrap();

    let _: () = server.cmd(&["SET", "shared", "other-client-token", "NX", "PX", "10000"]);
    assert!(matches!(mutex.try_lock().await, Err(Error::Busy { .. })));
    let _: i64 = server.cmd(&["DEL", "shared"]);

    let guard = mutex.try_lock().await.unwrap();
    let taken: Option<String> =
        server.cmd(&["SET", "shared", "other-client-token", "NX", "PX", "10000"]);
    assert_eq!(taken, None, "SET NX fails while dlock holds the key");
    let stored: String = server.cmd(&["GET", "shared"]);
    assert_eq!(
        stored,
        guard.token(),
        "the key holds the bare token, as other clients expect"
    );
    guard.unlock().await.unwrap();

    // A foreign lock without expiry reports Busy with no remaining time.
    let _: () = server.cmd(&["SET", "shared", "forever"]);
    assert!(matches!(
        mutex.try_lock().await,
        Err(Error::Busy {
            remaining: None,
            ..
        })
    ));
}

#[tokio::test]
async fn a_resent_acquire_with_the_same_token_is_granted_once() {
    let server = RedisServer::start();
    let mut conn = common::raw_conn(&server).await;
    // The fast path is a bare `SET NX PX`; a resend of it finds the key taken and runs the
    // slow-path script, which must recognise the token as ours.
    let acquire = common::script(&["mutex/bare.lua", "mutex/acquire.lua"]);
    let invoke = |conn: &mut redis::aio::MultiplexedConnection, token: &'static str| {
        let mut conn = conn.clone();
        let acquire = acquire.clone();
        async move {
            acquire
                .key("job")
                .arg(token)
                .arg(10_000)
                .invoke_async::<Vec<i64>>(&mut conn)
                .await
                .unwrap()
        }
    };
    let set: Option<String> = server.cmd(&["SET", "job", "tok-a", "NX", "PX", "1000"]);
    assert_eq!(set.as_deref(), Some("OK"));
    assert_eq!(
        invoke(&mut conn, "tok-a").await,
        vec![1],
        "a resend is granted again"
    );
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(pttl > 9_000, "the resend restarted the lease ({pttl} ms)");
    assert_eq!(
        invoke(&mut conn, "tok-b").await[0],
        0,
        "another token is busy"
    );
    let fence: Option<i64> = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(fence, None, "no fence is drawn until it is read");
    let _: i64 = server.cmd(&["DEL", "job"]);
    assert_eq!(
        invoke(&mut conn, "tok-b").await,
        vec![1],
        "the slow path grants a key freed meanwhile"
    );
}

#[tokio::test]
async fn invalid_input_gets_typed_errors() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let invalid = |r: dlock::Result<dlock::Mutex>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(client.mutex("")));
    assert!(invalid(client.mutex(&"x".repeat(dlock::MAX_NAME_LEN + 1))));
    assert!(invalid(client.mutex_with("job", opts(0, Wait::NoWait))));
    assert!(invalid(client.mutex_with(
        "job",
        LockOptions::default().ttl(dlock::MAX_TTL * 2)
    )));
    assert!(invalid(client.mutex_with(
        "job",
        LockOptions::default().backoff(Duration::from_secs(2), Duration::from_secs(1))
    )));
    // A waiter lease too short to be refreshed in time, or too long: named as such.
    for lease in [
        Duration::ZERO,
        Duration::from_millis(99),
        dlock::MAX_TTL * 2,
    ] {
        match client.fair_mutex_with("job", LockOptions::default().waiter_lease(lease)) {
            Err(Error::InvalidArgument(text)) => assert!(text.contains("waiter lease"), "{text}"),
            other => panic!("{lease:?}: {other:?}"),
        }
    }
    assert!(client
        .fair_mutex_with(
            "job",
            LockOptions::default().waiter_lease(dlock::MIN_WAITER_LEASE)
        )
        .is_ok());
    let mutex = client.mutex("job").unwrap();
    assert!(matches!(
        mutex.extend_token("t", Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::connect("not a url").await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_key_of_another_type_gets_the_wrong_type_error_and_is_left_alone() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let _: i64 = server.cmd(&["HSET", "job", "field", "value"]);
    let mutex = client
        .mutex_with("job", opts(1_000, Wait::Timeout(Duration::from_secs(1))))
        .unwrap();
    assert!(
        matches!(mutex.try_lock().await, Err(Error::WrongType { ref key, .. }) if key == "job")
    );
    assert!(matches!(mutex.lock().await, Err(Error::WrongType { .. })));
    assert!(matches!(
        mutex.release_token("t").await,
        Err(Error::WrongType { .. })
    ));
    let kind: String = server.cmd(&["TYPE", "job"]);
    assert_eq!(kind, "hash");

    let _: () = server.cmd(&["SET", "{other}:fence", "not-a-number"]);
    let other = client
        .mutex_with("other", opts(1_000, Wait::NoWait))
        .unwrap();
    // The fence is drawn on first read: granted, and reading the fence fails.
    let guard = other.try_lock().await.unwrap();
    assert!(
        matches!(guard.fence().await, Err(Error::WrongType { ref key, .. }) if key == "{other}:fence")
    );
    guard.unlock().await.unwrap();
    let counter: String = server.cmd(&["GET", "{other}:fence"]);
    assert_eq!(counter, "not-a-number", "left alone");
}

#[tokio::test]
async fn unreachable_redis_is_a_connection_error() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill9();
    let started = Instant::now();
    let result = Client::builder(&url)
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await;
    assert!(matches!(result, Err(Error::Connection(_))), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "fails promptly rather than hanging"
    );
}

#[tokio::test]
async fn a_server_gone_mid_life_is_a_connection_error_for_one_attempt() {
    let mut server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", opts(1_000, Wait::NoWait)).unwrap();
    mutex.try_lock().await.unwrap().unlock().await.unwrap();
    server.kill9();
    let error = mutex.try_lock().await.unwrap_err();
    assert!(matches!(error, Error::Connection(_)), "{error:?}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn keys_use_the_configured_prefix() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .prefix("app:")
        .connect()
        .await
        .unwrap();
    let guard = client.mutex("job").unwrap().try_lock().await.unwrap();
    let stored: String = server.cmd(&["GET", "app:job"]);
    assert_eq!(stored, guard.token());
    let drawn = guard.fence().await.unwrap();
    let fence: u64 = server.cmd(&["GET", "{app:job}:fence"]);
    assert_eq!(fence, drawn);
    let shared = Arc::new(guard);
    assert!(shared.is_held().await.unwrap());
}

#[tokio::test]
async fn a_fence_drawn_at_grant_costs_no_read_and_a_resend_keeps_it() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let eager = client
        .mutex_with("job", opts(10_000, Wait::NoWait).fence_at_grant())
        .unwrap();
    let lazy = client
        .mutex_with("job", opts(10_000, Wait::NoWait))
        .unwrap();
    let first = lazy.try_lock().await.unwrap();
    let lazy_fence = first.fence().await.unwrap();
    first.unlock().await.unwrap();
    let guard = eager.try_lock().await.unwrap();
    let fence = guard.drawn_fence().expect("drawn with the grant");
    assert!(
        fence > lazy_fence,
        "one counter orders both ways of drawing"
    );
    assert_eq!(guard.fence().await.unwrap(), fence);
    // A resend of the eager acquire (same token) is granted again with the same fence,
    // and restarts the lease.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let acquire = common::script(&["mutex/bare.lua", "mutex/acquire.lua"]);
    let mut conn = common::raw_conn(&server).await;
    let resent: dlock::__scripts::AcquireReply = acquire
        .key("job")
        .key("{job}:fence")
        .arg(guard.token())
        .arg(10_000)
        .arg("1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(resent[..], [1, fence as i64]);
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(pttl > 9_000, "the resend restarted the lease ({pttl} ms)");
    let counter: u64 = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(counter, fence, "the resend drew no second fence");
    guard.unlock().await.unwrap();
    // A counter that is not a number: nothing is granted when drawing at grant.
    let _: () = server.cmd(&["SET", "{job}:fence", "not-a-number"]);
    assert!(matches!(
        eager.try_lock().await,
        Err(Error::WrongType { ref key, .. }) if key == "{job}:fence"
    ));
    let held: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(held, None);
}

/// The mutex's acquire and release run unwrapped (not under `answer`: they run once per
/// hold), so they catch every refusal themselves: each comes back as a typed error, and a
/// fenced grant that fails after its `SET NX` took the key gives the key back, by `DEL` or,
/// where an ACL refuses that, by ending the hold at once. (A key the user may not touch at
/// all is refused before the script runs: core.rs.) Each control shows the user may take
/// the lock, so the key found free afterwards was given back, not never taken.
#[tokio::test]
async fn refusals_inside_the_unwrapped_mutex_scripts_lose_nothing() {
    let server = RedisServer::start();
    let user = |name: &str, rules: &[&str]| {
        let mut command = vec!["ACL", "SETUSER", name, "on", ">pw", "&*", "+@all"];
        command.extend_from_slice(rules);
        let _: () = server.cmd(&command);
        format!("redis://{name}:pw@127.0.0.1:{}", server.port())
    };
    // A denied key reads NOPERM; a denied command inside a script reads 'ERR The user
    // executing the script can't run this command' on Redis 6.2 and 7.0, 'ERR ACL failure
    // in script: User .. has no permissions to run ..' on Valkey 9 (whose words were cut
    // at their 'script: ' before, as if Redis's note of where it was raised).
    let refused = |outcome: dlock::Result<()>, what: &str| match outcome {
        Err(Error::Refused { reason, .. }) => assert!(
            reason.starts_with("NOPERM")
                || reason.contains("can't run this command")
                || reason.contains("has no permissions to run"),
            "{what}: {reason}"
        ),
        other => panic!("{what}: {other:?}"),
    };
    let held = |name: &str| -> Option<String> { server.cmd(&["GET", name]) };

    // May not read the clock: the fence draw is refused after the key was taken, which
    // gives it back.
    let url = user("noclock", &["~*", "-time"]);
    let client = Client::connect(&url).await.unwrap();
    let eager = client
        .mutex_with("clock", opts(10_000, Wait::NoWait).fence_at_grant())
        .unwrap();
    refused(eager.try_lock().await.map(drop), "a refused TIME");
    assert_eq!(held("clock"), None, "the key taken before TIME was kept");
    let lazy = client
        .mutex_with("clock", opts(10_000, Wait::NoWait))
        .unwrap();
    let control = lazy.try_lock().await.expect("the lock key may be written");
    // The lazy fence draw (a script under `answer`) is refused alike, the hold kept.
    refused(control.fence().await.map(drop), "a refused lazy fence");
    assert_eq!(held("clock").as_deref(), Some(control.token()));
    control.unlock().await.unwrap();

    // May not delete, and the counter cannot count: the grant cannot be given back by
    // DEL, and ends at once instead; the error names the counter.
    let url = user("nodelete", &["~*", "-del"]);
    let client = Client::connect(&url).await.unwrap();
    let _: () = server.cmd(&["SET", "{count}:fence", "not-a-number"]);
    let eager = client
        .mutex_with("count", opts(10_000, Wait::NoWait).fence_at_grant())
        .unwrap();
    match eager.try_lock().await {
        Err(Error::WrongType { key, .. }) => assert_eq!(key, "{count}:fence"),
        other => panic!("a counter that cannot count: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(held("count"), None, "the grant without a fence was kept");
    let _: () = server.cmd(&["DEL", "{count}:fence"]);
    let control = eager.try_lock().await.expect("the lock key may be written");
    assert_eq!(held("count").as_deref(), Some(control.token()));
    drop(control);

    // May not delete: the release is refused, and the hold stays the holder's until its
    // lease ends (nothing lost, nobody else let in).
    let mutex = client
        .mutex_with("del", opts(10_000, Wait::NoWait))
        .unwrap();
    let guard = mutex.try_lock().await.expect("the lock key may be written");
    let token = guard.token().to_string();
    refused(guard.unlock().await, "a refused DEL");
    assert_eq!(
        held("del"),
        Some(token),
        "the refused release left the hold"
    );
}

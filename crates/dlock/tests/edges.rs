//! More edges of the shared core, found by an adversarial review: cancelled unlocks and
//! give-backs, shutdown racing waits and dropped guards, extensions that shorten a lease,
//! hashes that must expire with their last holder, servers that are busy or refuse
//! channels, wakes of aborted waiters.

mod common;

use std::time::{Duration, Instant};

use dlock::{Client, LockOptions, Owner, Wait};
use dlock_testkit::RedisServer;

/// A fixed lease of `ttl`, no waiting.
fn fixed(ttl: Duration) -> LockOptions {
    LockOptions::default().ttl(ttl).wait(Wait::NoWait)
}

/// extend() to a shorter lease: server lease shrinks, local validity does not.
#[tokio::test]
async fn extending_to_a_shorter_lease_shortens_the_local_validity() {
    let server = RedisServer::start();
    let a = Client::connect(&server.url()).await.unwrap();
    let b = Client::connect(&server.url()).await.unwrap();
    let opts = fixed(Duration::from_secs(10));
    let mut g = a.mutex_with("ext", opts).unwrap().try_lock().await.unwrap();
    g.extend(Duration::from_millis(300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = b.mutex_with("ext", opts).unwrap().try_lock().await;
    eprintln!(
        "other grant: {:?}; first guard remaining {:?}, lost {:?}",
        other.as_ref().map(|g| g.token()),
        g.remaining(),
        g.lost_signal().lost()
    );
    assert!(
        !(other.is_ok() && g.lost_signal().lost().is_none()),
        "double holding: B granted while A's guard still reports {:?} valid",
        g.remaining()
    );
}

/// Same for a read hold ('e' entries).
#[tokio::test]
async fn a_read_hold_extended_shorter_is_not_believed_longer() {
    let server = RedisServer::start();
    let a = Client::connect(&server.url()).await.unwrap();
    let opts = fixed(Duration::from_secs(10));
    let lock = a.rwlock_with("rx", opts).unwrap();
    let mut g = lock.for_owner(&Owner::new()).try_read().await.unwrap();
    g.extend(Duration::from_millis(300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w = lock.try_write().await;
    assert!(
        !(w.is_ok() && g.lost_signal().lost().is_none()),
        "writer granted while reader believes it holds ({:?} left)",
        g.remaining()
    );
}

/// shutdown() while an acquire is on the wire, then the runtime ends (end of main).
#[test]
fn shutdown_with_an_acquire_in_flight_leaves_no_key() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = &server;
    rt.block_on(async {
        let client = Client::connect(&server.url()).await.unwrap();
        let m = client.mutex("inflight").unwrap();
        m.try_lock().await.unwrap().unlock().await.unwrap();
        server.pause();
        let task = tokio::spawn({
            let m = m.clone();
            async move { m.lock().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.shutdown().await;
        drop(task);
    });
    rt.shutdown_timeout(Duration::from_millis(10));
    server.resume();
    std::thread::sleep(Duration::from_millis(300));
    let pttl: i64 = server.cmd(&["PTTL", "inflight"]);
    assert!(
        pttl < 0,
        "after shutdown + end of runtime the lock is held for {pttl} ms more"
    );
}

/// A read hold with a long lease released, a short one abandoned: does the read hash
/// outlive every live holder (keeping other kinds / foreign SET NX out)?
#[tokio::test]
async fn read_holds_expire_with_their_last_live_holder() {
    let server = RedisServer::start();
    let c = Client::connect(&server.url()).await.unwrap();
    let long = c.rwlock_with("rw", fixed(Duration::from_secs(20))).unwrap();
    let short = c
        .rwlock_with("rw", fixed(Duration::from_millis(300)))
        .unwrap();
    let g1 = long.for_owner(&Owner::new()).try_read().await.unwrap();
    let _g2 = short
        .for_owner(&Owner::new())
        .try_read()
        .await
        .unwrap()
        .into_token();
    g1.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(short.readers().await.unwrap(), 0, "no live reader");
    let pttl: i64 = server.cmd(&["PTTL", "rw"]);
    let m = c
        .mutex_with("rw", LockOptions::default().wait(Wait::NoWait))
        .unwrap()
        .try_lock()
        .await;
    let foreign: Option<String> = server.cmd(&["SET", "rw", "x", "NX", "PX", "1000"]);
    assert!(pttl < 0, "no reader holds, yet the key lives {pttl} ms more; mutex: {m:?}; foreign SET NX: {foreign:?}");
}

/// Same for semaphore permits.
#[tokio::test]
async fn permits_expire_with_their_last_live_holder() {
    let server = RedisServer::start();
    let c = Client::connect(&server.url()).await.unwrap();
    let long = c
        .semaphore_with("sem", 3, fixed(Duration::from_secs(20)))
        .unwrap();
    let short = c
        .semaphore_with("sem", 3, fixed(Duration::from_millis(300)))
        .unwrap();
    let p1 = long.try_lock().await.unwrap();
    let _p2 = short.try_lock().await.unwrap().into_token();
    p1.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(short.held().await.unwrap(), 0);
    let pttl: i64 = server.cmd(&["PTTL", "sem"]);
    assert!(pttl < 0, "no permit held, yet the key lives {pttl} ms more");
}

/// Downgrade cancelled while Redis is paused: nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_cancelled_under_pause_leaves_nothing() {
    let server = RedisServer::start();
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(150))
        .connect()
        .await
        .unwrap();
    let lock = c
        .rwlock_with(
            "dg",
            LockOptions::default().renewed(Duration::from_secs(30)),
        )
        .unwrap();
    // warm up scripts
    lock.write()
        .await
        .unwrap()
        .downgrade()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let w = lock.write().await.unwrap();
    let _: () = server.cmd(&["CLIENT", "PAUSE", "500", "ALL"]);
    let r = tokio::time::timeout(Duration::from_millis(100), w.downgrade()).await;
    assert!(r.is_err());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n: i64 = server.cmd(&["EXISTS", "dg"]);
        if n == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "downgrade cancelled: key still there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Redis 6.2 can be set to replicate scripts whole (`lua-replicate-commands no`), which
/// refuses a write after `TIME`: every kind's scripts ask for effects replication first.
/// Later servers have no such setting (always effects): there the test only runs the
/// locks, which must work the same.
#[tokio::test]
async fn scripts_work_where_a_server_replicates_them_whole() {
    let server = RedisServer::start();
    let whole: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg(&["SET", "lua-replicate-commands", "no"])
        .query(&mut server.connection());
    let info: String = server.cmd(&["INFO", "server"]);
    if info.contains("redis_version:6.") {
        whole.expect("Redis 6.2 takes lua-replicate-commands");
        // The setting is what it claims: a script that writes after TIME is refused.
        let refused: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("redis.call('TIME') redis.call('SET', KEYS[1], 1)")
            .arg(1)
            .arg("control")
            .query(&mut server.connection());
        assert!(refused.is_err(), "the control script was not refused");
    }
    let client = Client::connect(&server.url()).await.unwrap();
    let fair = client.fair_mutex("whole-fair").unwrap().try_lock().await;
    fair.unwrap().unlock().await.unwrap();
    let reentrant = client.reentrant_mutex("whole-re").unwrap().try_lock().await;
    reentrant.unwrap().unlock().await.unwrap();
    let read = client.rwlock("whole-rw").unwrap().try_read().await;
    read.unwrap().unlock().await.unwrap();
    let write = client.rwlock("whole-w").unwrap().try_write().await;
    write.unwrap().unlock().await.unwrap();
    let permit = client.semaphore("whole-sem", 2).unwrap().try_lock().await;
    permit.unwrap().unlock().await.unwrap();
    let mutex = client
        .mutex("whole-mutex")
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(mutex.fence().await.unwrap() > 0, "a fence drawn after TIME");
    mutex.unlock().await.unwrap();
}

/// BUSY (a long script elsewhere) ends a Wait::Forever lock() at once as a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_server_is_retried_within_the_wait() {
    let server = RedisServer::start();
    // Redis 7.0 renamed it busy-reply-threshold and kept this name, the only one Redis 6.2
    // and every Valkey know too.
    let _: () = server.cmd(&["CONFIG", "SET", "lua-time-limit", "100"]);
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let m = c
        .mutex_with(
            "b",
            LockOptions::default().wait(Wait::Timeout(Duration::from_secs(10))),
        )
        .unwrap();
    m.try_lock().await.unwrap().unlock().await.unwrap();
    let url = server.url();
    let spin = std::thread::spawn(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("local t=redis.call('TIME')[1]+0 while redis.call('TIME')[1]+0 < t+2 do end")
            .arg(0)
            .query(&mut conn);
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = m.lock().await;
    spin.join().unwrap();
    eprintln!("lock() during BUSY: {r:?}");
    assert!(
        r.is_ok(),
        "lock() with a 10 s budget failed during a 2 s BUSY: {r:?}"
    );
}

/// A guard dropped just before shutdown(): its background release is not awaited.
#[test]
fn a_guard_dropped_before_shutdown_is_released_current_thread() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::connect(&server.url()).await.unwrap();
        let m = client.mutex("dropped").unwrap();
        {
            let _g = m.lock().await.unwrap();
            // work, then `?` returns early / scope ends
        }
        client.shutdown().await;
    });
    drop(rt);
    std::thread::sleep(Duration::from_millis(200));
    let pttl: i64 = server.cmd(&["PTTL", "dropped"]);
    assert!(
        pttl < 0,
        "guard dropped, shutdown() awaited, main returned: lock held {pttl} ms more"
    );
}

#[test]
fn a_guard_dropped_before_shutdown_is_released_multi_thread() {
    let server = RedisServer::start();
    let mut held = 0;
    for i in 0..20 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let name = format!("dropped-{i}");
        rt.block_on(async {
            let client = Client::connect(&server.url()).await.unwrap();
            let m = client.mutex(&name).unwrap();
            {
                let _g = m.lock().await.unwrap();
            }
            client.shutdown().await;
        });
        drop(rt);
        std::thread::sleep(Duration::from_millis(50));
        let pttl: i64 = server.cmd(&["PTTL", &name]);
        if pttl > 0 {
            held += 1;
        }
    }
    assert_eq!(held, 0, "{held}/20 runs left the lock held after shutdown");
}

/// A cancelled wait (timeout around lock()) right before shutdown: give-back not awaited.
#[test]
fn a_cancelled_wait_is_given_back_before_shutdown_returns() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let srv = &server;
    rt.block_on(async {
        let client = Client::connect(&srv.url()).await.unwrap();
        let m = client.fair_mutex("cw").unwrap();
        let holder = m.try_lock().await.unwrap();
        let _ = tokio::time::timeout(Duration::from_millis(100), m.lock()).await;
        holder.unlock().await.unwrap();
        client.shutdown().await;
    });
    drop(rt);
    std::thread::sleep(Duration::from_millis(200));
    let n: i64 = server.cmd(&["EXISTS", "{cw}:queue", "{cw}:queue-leases"]);
    assert_eq!(n, 0, "the cancelled waiter's queue place outlived shutdown");
}

/// Renewal restores the configured lease after a longer extend(): server shorter than local.
#[tokio::test]
async fn renewal_after_a_longer_extend_keeps_both_leases_in_step() {
    let server = RedisServer::start();
    let c = Client::connect(&server.url()).await.unwrap();
    let mut g = c
        .mutex_with(
            "el",
            LockOptions::default().renewed(Duration::from_millis(900)),
        )
        .unwrap()
        .lock()
        .await
        .unwrap();
    g.extend(Duration::from_secs(20)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // a renewal ran
    let pttl: i64 = server.cmd(&["PTTL", "el"]);
    let local = g.remaining();
    eprintln!("server {pttl} ms, local {local:?}");
    assert!(
        local.as_millis() as i64 <= pttl + 50,
        "local validity {local:?} exceeds the server lease {pttl} ms"
    );
}

/// Stress: a woken waiter aborted around the release must not strand the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wake_is_not_lost_when_its_waiter_is_aborted() {
    use rand::Rng;
    let server = RedisServer::start();
    let a = Client::connect(&server.url()).await.unwrap();
    let b = Client::connect(&server.url()).await.unwrap();
    let opts = LockOptions::default().ttl(Duration::from_secs(30));
    let mut stranded = 0;
    for i in 0..150 {
        let name = format!("w{i}");
        let holder = b.mutex_with(&name, opts).unwrap().try_lock().await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let m = a.mutex_with(&name, opts).unwrap();
            tasks.push(tokio::spawn(async move {
                let g = m.lock().await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                g.unlock().await
            }));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        let victim = rand::rng().random_range(0..3);
        let delay = rand::rng().random_range(0..1500u64);
        let unlock = tokio::spawn(holder.unlock());
        tokio::time::sleep(Duration::from_micros(delay)).await;
        tasks[victim].abort();
        unlock.await.unwrap().unwrap();
        let mut got = None;
        let deadline = Instant::now() + Duration::from_secs(3);
        // whoever gets it releases; all non-victims must finish
        for (k, t) in tasks.into_iter().enumerate() {
            if k == victim {
                let _ = t.await;
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left + Duration::from_secs(2), t).await {
                Ok(Ok(Ok(()))) => {
                    got = Some(());
                }
                Ok(other) => panic!("{other:?}"),
                Err(_) => {
                    stranded += 1;
                    eprintln!("iteration {i}: waiter {k} stranded (delay {delay}us)");
                    break;
                }
            }
        }
        let _ = got;
        let _: () = server.cmd(&["DEL", &name]);
    }
    assert_eq!(stranded, 0);
}

/// unlock() dropped (timeout) while a renewal is on the wire: nothing releases the lock.
#[test]
fn a_cancelled_unlock_still_releases() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let srv = &server;
    rt.block_on(async {
        let client = Client::connect(&srv.url()).await.unwrap();
        let g = client
            .mutex_with("ul", LockOptions::default().renewed(Duration::from_secs(3)))
            .unwrap()
            .lock()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(900)).await;
        srv.pause();
        tokio::time::sleep(Duration::from_millis(300)).await; // renewal round now in flight
        let r = tokio::time::timeout(Duration::from_millis(50), g.unlock()).await;
        assert!(r.is_err(), "unlock did not finish while Redis is frozen");
        srv.resume();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pttl: i64 = srv.cmd(&["PTTL", "ul"]);
        assert!(
            pttl < 0,
            "unlock() was cancelled: nobody holds the guard, yet the lock lives {pttl} ms more"
        );
    });
}

/// A user that may not SUBSCRIBE: does the notifier spin reconnecting?
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_without_channel_permission_poll_without_reconnecting() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL",
        "SETUSER",
        "nosub",
        "on",
        ">pw",
        "~*",
        "resetchannels",
        "+@all",
    ]);
    let url = format!("redis://nosub:pw@127.0.0.1:{}", server.port());
    let c = Client::connect(&url).await.unwrap();
    let m = c
        .mutex_with(
            "ns",
            LockOptions::default().wait(Wait::Timeout(Duration::from_secs(2))),
        )
        .unwrap();
    let holder = m.try_lock().await.unwrap();
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let waited = m.lock().await;
    assert!(
        matches!(waited, Err(dlock::Error::TimedOut { .. })),
        "{waited:?}"
    );
    let stats: String = server.cmd(&["INFO", "stats"]);
    let connections: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        connections < 20,
        "{connections} connections opened during a 2 s wait"
    );
    holder.unlock().await.unwrap();
}

/// A subscription the server refused is tried again while its waiter waits: once the user
/// may subscribe (an ACL change here; in a cluster, a slot served again after a failover
/// that refused the resubscription), the waiter listens again, without a new waiter
/// coming to subscribe for it. (Before, it polled until its wait ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_is_tried_again_while_its_waiter_waits() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL",
        "SETUSER",
        "latesub",
        "on",
        ">pw",
        "~*",
        "resetchannels",
        "+@all",
    ]);
    let url = format!("redis://latesub:pw@127.0.0.1:{}", server.port());
    let c = Client::connect(&url).await.unwrap();
    let m = c
        .mutex_with(
            "rs",
            LockOptions::default().wait(Wait::Timeout(Duration::from_secs(60))),
        )
        .unwrap();
    let holder = m.try_lock().await.unwrap();
    let waiter = tokio::spawn({
        let m = m.clone();
        async move { m.lock().await.map(|g| g.token().to_string()) }
    });
    // Refused: the ACL log has the channel denial.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let log: redis::Value = server.cmd(&["ACL", "LOG"]);
        if format!("{log:?}").contains("channel") {
            break;
        }
        assert!(Instant::now() < until, "the subscription was never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _: () = server.cmd(&["ACL", "SETUSER", "latesub", "allchannels"]);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let subscribed: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS"]);
        if !subscribed.is_empty() {
            break;
        }
        assert!(
            Instant::now() < until,
            "the refused subscription was not tried again while its waiter waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "the waiter should still be waiting");
    holder.unlock().await.unwrap();
    let granted = waiter.await.unwrap();
    assert!(granted.is_ok(), "{granted:?}");
}

/// A fair-mutex waiter queues, Redis freezes, its 400 ms budget runs out and it starts
/// giving its place back (which cannot finish while Redis is frozen); `outer` bounds the
/// whole wait, dropping it midway through the give-back when shorter than the freeze.
/// Returns the queue's length once Redis thaws.
async fn queue_left_after_a_frozen_give_back(outer: Duration) -> i64 {
    let server = RedisServer::start();
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let opts = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Timeout(Duration::from_millis(400)));
    let m = c.fair_mutex_with("gb", opts).unwrap();
    // Warm up: the acquire, release and queue-leave scripts are cached.
    let h0 = m.try_lock().await.unwrap();
    let short = LockOptions::default().wait(Wait::Timeout(Duration::from_millis(50)));
    let _ = c.fair_mutex_with("gb", short).unwrap().lock().await;
    h0.unlock().await.unwrap();
    let holder = m.try_lock().await.unwrap();
    let srv = &server;
    let _ = tokio::time::timeout(outer, async {
        let w = m.lock();
        tokio::pin!(w);
        // Let the waiter queue up, then freeze Redis.
        tokio::select! { r = &mut w => return Some(r), _ = tokio::time::sleep(Duration::from_millis(150)) => {} }
        srv.pause();
        Some(w.await)
    })
    .await;
    server.resume();
    let queued = queue_length_settles(&server, "{gb}:queue").await;
    holder.unlock().await.unwrap();
    queued
}

/// The future is dropped while the wait is giving its place back: the give-back goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_wait_while_it_gives_back_still_leaves_the_queue() {
    let queued = queue_left_after_a_frozen_give_back(Duration::from_millis(700)).await;
    assert_eq!(queued, 0, "a dropped wait left its queue place behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_wait_that_gives_back_undisturbed_leaves_the_queue() {
    let queued = queue_left_after_a_frozen_give_back(Duration::from_millis(5000)).await;
    assert_eq!(queued, 0, "the wait left its queue place behind");
}

/// The queue's length once it stops shrinking (give-backs retry while Redis was frozen;
/// give them up to 3 s after it thaws).
async fn queue_length_settles(server: &RedisServer, queue: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let queued: i64 = server.cmd(&["ZCARD", queue]);
        if queued == 0 || Instant::now() > deadline {
            return queued;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Item 1 again, but the release script was never run on this server (fresh server,
/// restart or failover): the give-back's EVALSHA answers NOSCRIPT after its timeout and
/// is never retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_gives_back_even_before_its_script_is_loaded() {
    let server = RedisServer::start();
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(150))
        .connect()
        .await
        .unwrap();
    let opts = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Timeout(Duration::from_secs(60)));
    let m = c.mutex_with("cold", opts).unwrap();
    // acquire script cached, release script not
    let _t = m.try_lock().await.unwrap().into_token();
    let _: () = server.cmd(&["DEL", "cold"]);
    let _: () = server.cmd(&["CLIENT", "PAUSE", "600", "ALL"]);
    let r = tokio::time::timeout(Duration::from_millis(350), m.lock()).await;
    assert!(r.is_err());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pttl: i64 = server.cmd(&["PTTL", "cold"]);
    assert!(
        pttl < 0,
        "cancelled wait left the lock held for {pttl} ms more"
    );
}

/// A release by token that does not say which kind took the lock (`dlock release NAME
/// TOKEN`) wakes the waiters of the kind that did: the next fair waiter, the next queued
/// writer, or the readers. Waiters here would otherwise sleep for a third of a 30 s waiter
/// lease (fair, writers) or the old writer's 30 s lease (readers), past the 5 s the test
/// gives them: they are granted within it only if the release woke them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_token_wakes_the_waiters_of_whatever_kind_took_the_lock() {
    let server = RedisServer::start();
    let holders = Client::connect(&server.url()).await.unwrap();
    let waiters = Client::connect(&server.url()).await.unwrap();
    let operator = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .waiter_lease(Duration::from_secs(30))
        .backoff(Duration::from_secs(20), Duration::from_secs(20))
        .wait(Wait::Timeout(Duration::from_secs(25)));
    for case in ["fair", "writer", "reader"] {
        let name = format!("by-token-{case}");
        let token = match case {
            "fair" => {
                let mutex = holders.fair_mutex_with(&name, options).unwrap();
                mutex.try_lock().await.unwrap().into_token()
            }
            _ => {
                let lock = holders.rwlock_with(&name, options).unwrap();
                lock.try_write().await.unwrap().into_token()
            }
        };
        let waiting = {
            let (waiters, name) = (waiters.clone(), name.clone());
            tokio::spawn(async move {
                match case {
                    "fair" => {
                        let mutex = waiters.fair_mutex_with(&name, options).unwrap();
                        mutex.lock().await.map(|g| g.into_token())
                    }
                    "writer" => {
                        let lock = waiters.rwlock_with(&name, options).unwrap();
                        lock.write().await.map(|g| g.into_token())
                    }
                    _ => {
                        // Two readers on one client: both must be let in.
                        let me = waiters.rwlock_with(&name, options).unwrap();
                        let you = me.for_owner(&Owner::new());
                        let (a, b) = tokio::join!(me.read(), you.read());
                        a.and(b).map(|g| g.into_token())
                    }
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await; // queued and subscribed
                                                              // The plain mutex's handle, as `dlock release` without --fair or --write uses.
        let plain = operator.mutex(&name).unwrap();
        plain.release_token(&token).await.unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(
            matches!(woken, Ok(Ok(Ok(_)))),
            "{case}: the release did not wake the waiter: {woken:?}"
        );
    }
    // A token of another kind is refused with the kind it found, not released.
    let semaphore = holders
        .semaphore_with("by-token-permit", 2, options)
        .unwrap();
    let permit = semaphore.try_lock().await.unwrap();
    let refused = operator
        .mutex("by-token-permit")
        .unwrap()
        .release_token(permit.token())
        .await;
    assert!(
        matches!(&refused, Err(dlock::Error::WrongType { what, .. }) if what.contains("semaphore")),
        "{refused:?}"
    );
    assert!(permit.is_held().await.unwrap());
}

/// Once a hold is known lost, every view of the guard agrees: `remaining` is zero and
/// `valid_until` has passed, whether a renewal, a fence draw or an extend found it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_found_lost_reports_no_time_left_and_its_signal_fires() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .mutex_with("lost-views", fixed(Duration::from_secs(30)))
        .unwrap();

    // An extend that finds the token gone fires the lost signal.
    let mut guard = mutex.try_lock().await.unwrap();
    let _: i64 = server.cmd(&["DEL", "lost-views"]);
    assert!(matches!(
        guard.extend(Duration::from_secs(30)).await,
        Err(dlock::Error::Lost { .. })
    ));
    assert_eq!(guard.lost_signal().lost(), Some(dlock::LostReason::Taken));
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(guard.valid_until() <= Instant::now());
    drop(guard);

    // A fence draw that finds the token gone: the same.
    let guard = mutex.try_lock().await.unwrap();
    let _: () = server.cmd(&["SET", "lost-views", "someone-else"]);
    assert!(matches!(
        guard.fence().await,
        Err(dlock::Error::Lost { .. })
    ));
    assert_eq!(guard.lost_signal().lost(), Some(dlock::LostReason::Taken));
    assert_eq!(guard.remaining(), Duration::ZERO);
}

/// Fences stay below 2^53, where the scripts' numbers are exact: a counter at or past it
/// is refused by name, and nothing is granted.
#[tokio::test]
async fn a_fencing_counter_past_2_pow_53_is_refused_and_grants_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let _: () = server.cmd(&["SET", "{huge}:fence", "9007199254740993"]);
    let eager = client
        .mutex_with("huge", fixed(Duration::from_secs(30)).fence_at_grant())
        .unwrap();
    let refused = eager.try_lock().await;
    assert!(
        matches!(&refused, Err(dlock::Error::WrongType { what, .. }) if what.contains("2^53")),
        "{refused:?}"
    );
    let fair = client
        .fair_mutex_with("huge", fixed(Duration::from_secs(30)))
        .unwrap();
    let refused = fair.try_lock().await;
    assert!(
        matches!(&refused, Err(dlock::Error::WrongType { what, .. }) if what.contains("2^53")),
        "{refused:?}"
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", "huge"]), 0, "nothing granted");
    let counter: String = server.cmd(&["GET", "{huge}:fence"]);
    assert_eq!(counter, "9007199254740993", "nothing drawn");
}

/// A fence is drawn in one write that reads the old counter (`SET .. GET`): a value that
/// cannot count is put back (its text), and nothing is granted; a counter ahead of the
/// clock (a clock stepped back) counts on from itself; a draw clears an expiry someone put
/// on a counter (a counter never expires).
#[tokio::test]
async fn a_fence_draw_puts_back_a_counter_it_cannot_count_and_counts_on_past_the_clock() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let _: () = server.cmd(&["SET", "{text}:fence", "not a number"]);
    let eager = client
        .mutex_with("text", fixed(Duration::from_secs(30)).fence_at_grant())
        .unwrap();
    let fair = client
        .fair_mutex_with("text", fixed(Duration::from_secs(30)))
        .unwrap();
    let semaphore = client
        .semaphore_with("text", 2, fixed(Duration::from_secs(30)))
        .unwrap();
    for refused in [
        eager.try_lock().await.map(drop),
        fair.try_lock().await.map(drop),
        semaphore.try_lock().await.map(drop),
    ] {
        assert!(
            matches!(&refused, Err(dlock::Error::WrongType { .. })),
            "{refused:?}"
        );
    }
    // The lazily drawn fence of a plain hold: refused, the hold itself untouched.
    let plain = client
        .mutex_with("text", fixed(Duration::from_secs(30)))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(matches!(
        plain.fence().await,
        Err(dlock::Error::WrongType { .. })
    ));
    plain.unlock().await.unwrap();
    let counter: String = server.cmd(&["GET", "{text}:fence"]);
    assert_eq!(counter, "not a number", "the counter was changed");

    // Ahead of the clock (about 1.8e15 µs now): the counter goes on by one.
    let ahead = 5_000_000_000_000_000u64;
    let _: () = server.cmd(&["SET", "{ahead}:fence", &ahead.to_string(), "PX", "600000"]);
    let eager = client
        .mutex_with("ahead", fixed(Duration::from_secs(30)).fence_at_grant())
        .unwrap();
    for step in 1..=2 {
        let guard = eager.try_lock().await.unwrap();
        assert_eq!(guard.fence().await.unwrap(), ahead + step);
        guard.unlock().await.unwrap();
    }
    let pttl: i64 = server.cmd(&["PTTL", "{ahead}:fence"]);
    assert_eq!(pttl, -1, "the counter keeps an expiry");
    // Negative control: a counter behind the clock gives the clock, far above it.
    let _: () = server.cmd(&["SET", "{behind}:fence", "7"]);
    let guard = client
        .mutex_with("behind", fixed(Duration::from_secs(30)).fence_at_grant())
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(guard.fence().await.unwrap() > 1_000_000_000_000_000);
}

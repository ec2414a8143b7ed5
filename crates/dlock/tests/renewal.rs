//! The watchdog, the lost-lock signal and `with_lock`, against real redis-servers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, LostReason, Wait};
use dlock_testkit::RedisServer;

fn renewed(ttl_ms: u64) -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_millis(ttl_ms))
        .wait(Wait::NoWait)
}

fn script_calls(server: &RedisServer) -> u64 {
    let calls = server.command_calls();
    calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0)
}

#[tokio::test]
async fn a_one_second_lease_stays_held_for_five_seconds_under_renewal() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", renewed(1_000)).unwrap();
    let guard = mutex.try_lock().await.unwrap();
    let competitor = Client::connect(&server.url()).await.unwrap();
    let rival = competitor.mutex_with("job", renewed(1_000)).unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        assert!(matches!(rival.try_lock().await, Err(Error::Busy { .. })));
        assert_eq!(guard.lost_signal().lost(), None);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(guard.is_held().await.unwrap());
    guard.unlock().await.unwrap();
    assert!(rival.try_lock().await.is_ok());
}

#[tokio::test]
async fn no_renewal_is_sent_after_unlock() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", renewed(150)).unwrap();

    // Control: while held, renewals do show up in the counter we watch.
    let guard = mutex.try_lock().await.unwrap();
    let before = script_calls(&server);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        script_calls(&server) >= before + 2,
        "renewals are visible while held"
    );

    guard.unlock().await.unwrap();
    let after_unlock = script_calls(&server);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        script_calls(&server),
        after_unlock,
        "nothing sent after unlock"
    );
}

/// An unlock that lands in the middle of a renewal tick still ends renewal: 40 unlocks, at
/// every phase of a 10 ms tick, and no renewal is sent after them.
///
/// Each phase needs an unlock of a live lease. A 30 ms lease lapses when this process is
/// kept off the CPU for about 20 ms, which a loaded machine does: the unlock then finds the
/// lock gone and says so (`Lost`), rightly, since its lease had ended by then. That phase is
/// tried again on a fresh lease; a `Lost` for a lease still valid here would be a bug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_racing_a_renewal_tick_still_ends_renewal() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", renewed(30)).unwrap();
    let before = script_calls(&server);
    let mut unlocks = 0u64;
    for round in 0..40u64 {
        let mut lapsed = 0;
        loop {
            let guard = mutex.try_lock().await.unwrap();
            // Renewals are due every 10 ms: unlock lands at every phase of a tick.
            tokio::time::sleep(Duration::from_micros(round * 500)).await;
            unlocks += 1;
            // Read before the unlock, which ends it when it finds the lock gone; a renewal
            // still in flight can only move it later.
            let valid_until = guard.lost_signal().valid_until();
            match guard.unlock().await {
                Ok(()) => break,
                Err(Error::Lost { .. }) => {
                    // Redis keeps a lease past its local deadline: found gone, it had ended.
                    assert!(
                        valid_until <= Instant::now(),
                        "unlock found a lease that was still valid gone"
                    );
                    lapsed += 1;
                    assert!(
                        lapsed < 20,
                        "round {round}: every lease lapsed before its unlock"
                    );
                }
                Err(err) => panic!("round {round}: {err}"),
            }
        }
    }
    let settled = script_calls(&server);
    // Control: renewals did run between the grants and the unlocks, racing them, and
    // they show up in the counter read below (a grant is a SET, an unlock one script
    // call, and the release and renewal scripts may each cost a NOSCRIPT once).
    assert!(
        settled - before > unlocks + 2,
        "no renewal was sent during the rounds: {} script calls for {unlocks} unlocks",
        settled - before
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        script_calls(&server),
        settled,
        "a renewal outlived its unlock"
    );
}

#[tokio::test]
async fn lost_fires_when_the_key_is_deleted() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client
        .mutex_with("job", renewed(600))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let _: i64 = server.cmd(&["DEL", "job"]);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    assert_eq!(reason.expect("lost fired"), LostReason::Taken);
    assert!(matches!(guard.unlock().await, Err(Error::Lost { .. })));
}

#[tokio::test]
async fn lost_fires_when_the_key_is_overwritten_and_the_new_holder_is_left_alone() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client
        .mutex_with("job", renewed(600))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let _: () = server.cmd(&["SET", "job", "someone-else", "PX", "60000"]);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    assert_eq!(reason.expect("lost fired"), LostReason::Taken);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(
        pttl > 55_000,
        "the new holder's lease was not renewed by us"
    );
    let value: String = server.cmd(&["GET", "job"]);
    assert_eq!(value, "someone-else");
}

#[tokio::test]
async fn lost_fires_by_the_local_deadline_when_redis_is_paused() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let ttl = Duration::from_millis(1_000);
    let guard = client
        .mutex_with("job", renewed(ttl.as_millis() as u64))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let paused_at = Instant::now();
    server.pause();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    let fired_at = Instant::now();
    server.resume();
    assert_eq!(
        reason.expect("lost fired while Redis was frozen"),
        LostReason::Expired
    );
    // The last successful renewal was sent before the pause, so the server-side lease ends
    // no earlier than paused_at - (time since that renewal) + ttl; the local deadline must
    // not be later than paused_at + ttl, and the signal must not fire before it.
    let deadline = guard.valid_until();
    assert!(
        deadline <= paused_at + ttl,
        "validity reached past what Redis granted"
    );
    assert!(fired_at >= deadline, "fired before the deadline");
}

#[tokio::test]
async fn with_lock_returns_the_value_and_releases() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", renewed(300)).unwrap();
    let value = mutex
        .with_lock(|fence| async move {
            tokio::time::sleep(Duration::from_millis(700)).await; // outlives two leases
            fence * 10
        })
        .await
        .unwrap();
    assert_eq!(value, mutex.last_fence().await.unwrap() * 10);
    let held: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(held, None);
}

#[tokio::test]
async fn with_lock_cancels_the_work_when_the_lock_is_lost() {
    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", renewed(300)).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let (flag, done) = (DropFlag(dropped.clone()), finished.clone());
    let thief = {
        let url = server.url();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let client = redis::Client::open(url).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("SET")
                .arg("job")
                .arg("thief")
                .query_async(&mut conn)
                .await
                .unwrap();
        })
    };
    let result = mutex
        .with_lock(|_fence| async move {
            let _flag = flag;
            tokio::time::sleep(Duration::from_secs(30)).await;
            done.store(true, Ordering::SeqCst);
        })
        .await;
    thief.await.unwrap();
    assert!(matches!(result, Err(Error::Lost { .. })), "{result:?}");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the work's future was dropped"
    );
    assert!(!finished.load(Ordering::SeqCst));
    let value: String = server.cmd(&["GET", "job"]);
    assert_eq!(value, "thief", "the thief's lock was not touched");
}

#[tokio::test]
async fn max_hold_caps_renewal() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = renewed(300).max_hold(Duration::from_millis(600));
    let guard = client
        .mutex_with("job", options)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::Expired);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "renewed until the cap"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let held: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(held, None, "the lease ran out after the cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_locks_are_renewed_in_a_few_calls_per_round() {
    const LOCKS: usize = 1_000;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let ttl = Duration::from_millis(1_500);
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let mutex = client
            .mutex_with(&format!("job-{i}"), renewed(ttl.as_millis() as u64))
            .unwrap();
        guards.push(mutex.try_lock().await.unwrap());
    }
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    // Three renewal periods (ttl / 3 each), i.e. about three rounds.
    tokio::time::sleep(ttl).await;
    let calls = script_calls(&server);
    println!("{LOCKS} held locks: {calls} renewal calls in 3 rounds");
    assert!(calls >= 3, "renewal ran ({calls} calls)");
    assert!(
        calls <= 60,
        "{calls} calls for 3 rounds of {LOCKS} locks is not batched"
    );
    for guard in &guards {
        assert_eq!(guard.lost_signal().lost(), None);
    }
    let pttl: i64 = server.cmd(&["PTTL", "job-0"]);
    assert!(pttl > 0);
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn renewal_retries_through_dropped_connections() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client
        .mutex_with("job", renewed(1_800))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let rival = Client::connect(&server.url()).await.unwrap();
    let rival = rival.mutex_with("job", renewed(1_800)).unwrap();
    // Cut every client connection (not the test's own) several times across three leases:
    // renewals fail, reconnect and retry before the deadline (with 1.2 s to spare after
    // a renewal is due, so a loaded machine has time to reconnect).
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        let _: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    }
    assert_eq!(
        guard.lost_signal().lost(),
        None,
        "the lease survived the disconnections"
    );
    // The rival's own connection was cut too: its first request may fail and reconnect.
    let mut attempt = rival.try_lock().await;
    if matches!(attempt, Err(Error::Connection(_))) {
        attempt = rival.try_lock().await;
    }
    assert!(matches!(attempt, Err(Error::Busy { .. })), "{attempt:?}");
    let holder: String = server.cmd(&["GET", "job"]);
    assert_eq!(holder, guard.token());
    guard.unlock().await.unwrap();
}

/// An extend to a shorter lease moves the next renewal earlier: the watchdog, asleep
/// until the old lease's renewal time, must wake for the new one.
#[tokio::test]
async fn renewal_follows_an_extend_to_a_shorter_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("job", renewed(30_000)).unwrap();
    let mut guard = mutex.try_lock().await.unwrap();
    // Let the watchdog go to sleep until the 30 s lease's renewal time.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A lease long enough that a renewal a few hundred ms late on a loaded machine still
    // lands in time, and short enough to end long before the old renewal time (10 s).
    guard.extend(Duration::from_millis(1_500)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert_eq!(guard.lost_signal().lost(), None);
    assert!(guard.is_held().await.unwrap());
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(
        (0..=1_500).contains(&pttl),
        "renewed with the new lease: {pttl} ms"
    );
    guard.unlock().await.unwrap();
}

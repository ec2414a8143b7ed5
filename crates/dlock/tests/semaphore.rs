//! The semaphore against a real redis-server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, LostReason, Wait};
use dlock_testkit::RedisServer;

fn options(wait: Wait) -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_secs(5))
        .wait(wait)
        .waiter_lease(Duration::from_secs(2))
}

/// 16 tasks over 4 clients take turns; returns the most holders seen at once.
async fn most_concurrent(server: &RedisServer, limited: bool) -> usize {
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let client = Client::connect(&server.url()).await.unwrap();
        let semaphore = client
            .semaphore_with("pool", 3, options(Wait::Timeout(Duration::from_secs(30))))
            .unwrap();
        let (holding, most) = (holding.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let permit = if limited {
                    Some(semaphore.lock().await.unwrap())
                } else {
                    None
                };
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3 + task % 3)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                if let Some(permit) = permit {
                    permit.unlock().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    most.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_n_holders_and_n_is_reached() {
    let server = RedisServer::start();
    assert_eq!(most_concurrent(&server, true).await, 3);
    let left: i64 = server.cmd(&[
        "EXISTS",
        "pool",
        "{pool}:queue",
        "{pool}:queue-leases",
        "{pool}:expiry",
    ]);
    assert_eq!(left, 0, "nothing left once every permit is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn negative_control_without_the_semaphore_more_hold_at_once() {
    let server = RedisServer::start();
    assert!(most_concurrent(&server, false).await > 3);
}

#[tokio::test]
async fn expired_permits_are_reclaimed_by_the_next_acquirer() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let fixed = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .wait(Wait::NoWait);
    let semaphore = client.semaphore_with("pool", 2, fixed).unwrap();
    // Two holders vanish without giving their permits back.
    std::mem::forget(semaphore.try_lock().await.unwrap());
    std::mem::forget(semaphore.try_lock().await.unwrap());
    assert!(matches!(
        semaphore.try_lock().await,
        Err(Error::Busy { .. })
    ));
    assert_eq!(semaphore.held().await.unwrap(), 2);
    // Past both leases: a waiter that came sooner would be granted when the first one
    // ended, the second one still live (and rightly kept).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let waiter = client
        .semaphore_with("pool", 2, options(Wait::Timeout(Duration::from_secs(5))))
        .unwrap();
    let permit = waiter
        .lock()
        .await
        .expect("an expired permit was reclaimed");
    let fields: Vec<String> = server.cmd(&["HKEYS", "pool"]);
    let permits = fields.iter().filter(|f| f.starts_with("h:")).count();
    assert_eq!(permits, 1, "both expired permits were removed: {fields:?}");
    assert_eq!(waiter.held().await.unwrap(), 1);
    permit.unlock().await.unwrap();
}

#[tokio::test]
async fn every_permit_has_its_own_token_fence_and_lost_signal() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let semaphore = client
        .semaphore_with("pool", 3, options(Wait::NoWait))
        .unwrap();
    let a = semaphore.try_lock().await.unwrap();
    let b = semaphore.try_lock().await.unwrap();
    assert_ne!(a.token(), b.token());
    assert!(b.fence().await.unwrap() > a.fence().await.unwrap());
    let _: i64 = server.cmd(&["HDEL", "pool", &format!("h:{}", a.token())]);
    let reason = tokio::time::timeout(Duration::from_secs(5), a.lost())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::Taken);
    assert!(matches!(a.unlock().await, Err(Error::Lost { .. })));
    assert_eq!(
        b.lost_signal().lost(),
        None,
        "the other permit is unaffected"
    );
    b.unlock().await.unwrap();
}

#[tokio::test]
async fn a_freed_permit_wakes_a_waiter() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let long = |wait| {
        options(wait)
            .renewed(Duration::from_secs(30))
            .waiter_lease(Duration::from_secs(60))
            .backoff(Duration::from_secs(20), Duration::from_secs(20))
    };
    let semaphore = client
        .semaphore_with("pool", 1, long(Wait::NoWait))
        .unwrap();
    let held = semaphore.try_lock().await.unwrap();
    let waiter = client
        .semaphore_with("pool", 1, long(Wait::Timeout(Duration::from_secs(8))))
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["ZCARD", "{pool}:queue"]) != 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    held.unlock().await.unwrap();
    // 30 s permit leases, re-checks every 20 s: only the wake-up gets it within 8 s.
    let permit = waiting.await.unwrap().unwrap();
    permit.unlock().await.unwrap();
}

#[tokio::test]
async fn invalid_permits_and_wrong_types_are_typed_errors() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    assert!(matches!(
        client.semaphore("pool", 0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.semaphore("pool", dlock::semaphore::MAX_PERMITS + 1),
        Err(Error::InvalidArgument(_))
    ));
    let _: () = server.cmd(&["SET", "pool", "x"]);
    let semaphore = client
        .semaphore_with("pool", 2, options(Wait::NoWait))
        .unwrap();
    assert!(matches!(
        semaphore.try_lock().await,
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn clients_with_different_n_each_enforce_their_own() {
    // The documented behaviour: N is the caller's, checked against the live permits.
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let three = client
        .semaphore_with("pool", 3, options(Wait::NoWait))
        .unwrap();
    let five = client
        .semaphore_with("pool", 5, options(Wait::NoWait))
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(three.try_lock().await.unwrap());
    }
    assert!(matches!(three.try_lock().await, Err(Error::Busy { .. })));
    held.push(five.try_lock().await.expect("N = 5 admits a fourth"));
    held.push(five.try_lock().await.expect("and a fifth"));
    assert!(matches!(five.try_lock().await, Err(Error::Busy { .. })));
    assert_eq!(five.held().await.unwrap(), 5);
    for permit in held.drain(..3) {
        permit.unlock().await.unwrap();
    }
    // Two held: N = 3 admits one more, then is full.
    held.push(three.try_lock().await.unwrap());
    assert!(matches!(three.try_lock().await, Err(Error::Busy { .. })));
    assert!(five.try_lock().await.is_ok(), "while N = 5 still admits");
}

/// Waits until `n` waiters are queued on `name`.
async fn queued(server: &RedisServer, name: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["ZCARD", &format!("{{{name}}}:queue")]) != n {
        assert!(Instant::now() < deadline, "{n} waiters never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A waiter granted from the queue makes the next in line watch the leases: when that
/// holder crashes, the next waiter gets the permit when its lease ends, not when its own
/// place in the queue is next refreshed. (Found by dlock-torture's holder-crash: the
/// semaphore's hand-off after a crash took up to a third of the waiter lease.)
#[tokio::test]
async fn after_a_crash_the_next_in_line_gets_the_permit_when_the_lease_ends() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // Places refreshed every 20 s, re-checks every 20 s: only the lease's end can hand
    // over well within the 8 s the second waiter waits.
    let slow = |ttl: Duration, wait| {
        LockOptions::default()
            .ttl(ttl)
            .wait(wait)
            .waiter_lease(Duration::from_secs(60))
            .backoff(Duration::from_secs(20), Duration::from_secs(20))
    };
    let semaphore = client
        .semaphore_with("pool", 1, slow(Duration::from_secs(30), Wait::NoWait))
        .unwrap();
    let held = semaphore.try_lock().await.unwrap();
    let wait = Wait::Timeout(Duration::from_secs(8));
    // The first waiter's permit will be abandoned: a 500 ms lease, not renewed.
    let crashing = client
        .semaphore_with("pool", 1, slow(Duration::from_millis(500), wait))
        .unwrap();
    let first = tokio::spawn(async move { crashing.lock().await });
    queued(&server, "pool", 1).await;
    let next = client
        .semaphore_with("pool", 1, slow(Duration::from_secs(30), wait))
        .unwrap();
    let second = tokio::spawn(async move { next.lock().await });
    queued(&server, "pool", 2).await;
    held.unlock().await.unwrap();
    let abandoned = first.await.unwrap().unwrap();
    let crashed = Instant::now();
    std::mem::forget(abandoned);
    let permit = second
        .await
        .unwrap()
        .expect("the next in line took the abandoned permit");
    // About 0.5 s; without the wake-up, the wait's last attempt at its 8 s deadline.
    assert!(
        crashed.elapsed() < Duration::from_secs(5),
        "the hand-off took {:?}",
        crashed.elapsed()
    );
    permit.unlock().await.unwrap();
}

/// The last permit handed to the next in line stays in the one hash (its release keeps
/// the emptied hash for the grant rather than delete and re-create it): the new holder's
/// entry, its kind, its index, and an expiry that follows the new lease even when it
/// ends before the old one did, in a release that deletes nothing and reads the queue
/// once. When nobody is handed it, hash and index go.
#[tokio::test]
async fn the_last_permit_handed_on_keeps_a_whole_hash_and_an_unhanded_one_leaves_none() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let with = |ttl: Duration, wait| {
        LockOptions::default()
            .ttl(ttl)
            .wait(wait)
            .waiter_lease(Duration::from_secs(60))
    };
    let semaphore = client
        .semaphore_with("pool", 1, with(Duration::from_secs(60), Wait::NoWait))
        .unwrap();
    let held = semaphore.try_lock().await.unwrap();
    let waiter = client
        .semaphore_with(
            "pool",
            1,
            with(
                Duration::from_secs(20),
                Wait::Timeout(Duration::from_secs(8)),
            ),
        )
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    queued(&server, "pool", 1).await;
    let first_fence = held.fence().await.unwrap();
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    held.unlock().await.unwrap();
    let permit = waiting.await.unwrap().unwrap();
    // The release's commands (a script's own included): no DEL of the emptied hash, one
    // HSET (the grant's entry), and two ZRANGEs (the index's head, the first two in line).
    let stats = server.command_calls();
    let calls = |command: &str| stats.get(command).copied().unwrap_or(0);
    assert_eq!(
        (calls("del"), calls("hset"), calls("zrange")),
        (0, 1, 2),
        "{stats:?}"
    );
    assert!(permit.fence().await.unwrap() > first_fence);

    let field = format!("h:{}", permit.token());
    let mut fields: Vec<String> = server.cmd(&["HKEYS", "pool"]);
    fields.sort();
    let mut expected = vec![field, "~ends".into(), "~kind".into()];
    expected.sort();
    assert_eq!(fields, expected);
    assert_eq!(
        server.cmd::<String>(&["HGET", "pool", "~kind"]),
        "semaphore"
    );
    let index: Vec<String> = server.cmd(&["ZRANGE", "{pool}:expiry", "0", "-1"]);
    assert_eq!(index, [permit.token().to_string()]);
    // The 60 s hold it replaced no longer sets when the keys expire: the 20 s lease does.
    for key in ["pool", "{pool}:expiry"] {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        assert!((1..=20_000).contains(&pttl), "{key} expires in {pttl} ms");
    }
    assert_eq!(semaphore.held().await.unwrap(), 1);

    permit.unlock().await.unwrap();
    for key in ["pool", "{pool}:expiry", "{pool}:queue"] {
        assert_eq!(server.cmd::<i64>(&["EXISTS", key]), 0, "{key} is left");
    }
}

/// A release that cannot draw the next in line's fence (the counter is not a number)
/// wakes that waiter instead of handing it the permit, and the hash it emptied is gone,
/// not kept for a grant that did not happen. The waiter is written into the queue by
/// hand and listens nowhere, so no attempt of its own cleans up after the release.
#[tokio::test]
async fn an_emptied_hash_whose_hand_off_failed_is_deleted() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default().ttl(Duration::from_secs(60));
    let semaphore = client.semaphore_with("pool", 1, options).unwrap();
    let held = semaphore.try_lock().await.unwrap();
    let time: Vec<String> = server.cmd(&["TIME"]);
    let now_ms: i64 = time[0].parse::<i64>().unwrap() * 1000;
    let lease_end = (now_ms + 60_000).to_string();
    // A waiter asking for a 5 s permit (the `~<ttl ms>` of a queued token).
    let _: i64 = server.cmd(&["ZADD", "{pool}:queue", "1", "ghost~5000"]);
    let _: i64 = server.cmd(&["ZADD", "{pool}:queue-leases", &lease_end, "ghost~5000"]);
    let _: () = server.cmd(&["SET", "{pool}:fence", "not a number"]);
    held.unlock().await.unwrap();
    for key in ["pool", "{pool}:expiry"] {
        assert_eq!(server.cmd::<i64>(&["EXISTS", key]), 0, "{key} is left");
    }
    let queue: Vec<String> = server.cmd(&["ZRANGE", "{pool}:queue", "0", "-1"]);
    assert_eq!(queue, ["ghost~5000"], "the woken waiter keeps its place");
}

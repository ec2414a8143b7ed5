//! Weighted permits (`Semaphore::lock_many`) against real redis-servers: the weight held
//! never exceeds N (tasks, OS processes), strict queue order, hand-off of k to a waiting
//! k, refusals, cancellation, the stored format, Cluster and Sentinel.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::{MasterWithReplicas, RedisCluster, RedisServer, SentinelGroup};

fn options(wait: Wait) -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_secs(5))
        .wait(wait)
        .waiter_lease(Duration::from_secs(2))
}

/// Waiters that re-check only every 20 s, with 30 s leases and places: within a few
/// seconds only a hand-off or a wake-up can grant them.
fn slow(wait: Wait) -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_secs(30))
        .wait(wait)
        .waiter_lease(Duration::from_secs(60))
        .backoff(Duration::from_secs(20), Duration::from_secs(20))
}

/// Waits until `n` waiters are queued on `name`.
async fn queued(server: &RedisServer, name: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["ZCARD", &format!("{{{name}}}:queue")]) != n {
        assert!(Instant::now() < deadline, "{n} waiters never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const N: u32 = 4;

/// 12 tasks over 4 clients take 1, 2 or 3 of 4 permits in turns; returns the most
/// weight held at once.
async fn most_weight_at_once(server: &RedisServer) -> usize {
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..12u32 {
        let client = Client::connect(&server.url()).await.unwrap();
        let semaphore = client
            .semaphore_with("pool", N, options(Wait::Timeout(Duration::from_secs(30))))
            .unwrap();
        let (holding, most) = (holding.clone(), most.clone());
        let k = 1 + task % 3;
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let permit = semaphore.lock_many(k).await.unwrap();
                assert_eq!(permit.weight(), k);
                let now = holding.fetch_add(k as usize, Ordering::SeqCst) + k as usize;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3 + u64::from(task % 3))).await;
                holding.fetch_sub(k as usize, Ordering::SeqCst);
                permit.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    most.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_weight_held_never_exceeds_n_under_many_tasks() {
    let server = RedisServer::start();
    let most = most_weight_at_once(&server).await;
    assert!(most <= N as usize, "{most} of {N} permits held at once");
    assert!(most >= 3, "the tasks never held more than {most} at once");
    let left: i64 = server.cmd(&[
        "EXISTS",
        "pool",
        "{pool}:queue",
        "{pool}:queue-leases",
        "{pool}:expiry",
    ]);
    assert_eq!(left, 0, "nothing left once every permit is back");
}

/// Counts weight in use in Redis, across processes: `KEYS[1]` the weight in use, `KEYS[2]`
/// the most seen; returns the weight in use after adding `ARGV[1]`.
const IN_USE: &str = "local v = redis.call('INCRBY', KEYS[1], ARGV[1]) \
    if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end \
    return v";

const CHILD_ENV: &str = "DLOCK_WEIGHTED_CHILD_URL";

/// Not a test on its own: the body of each OS process that
/// `the_weight_held_never_exceeds_n_across_processes` starts (it returns at once
/// unless started so).
#[test]
fn child_process_takes_weighted_permits() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let mut tasks = Vec::new();
        for task in 0..3u32 {
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let client = Client::connect(&url).await.unwrap();
                let semaphore = client
                    .semaphore_with("procs", N, options(Wait::Timeout(Duration::from_secs(60))))
                    .unwrap();
                let mut conn = dlock::redis::Client::open(url.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                let in_use = dlock::redis::Script::new(IN_USE);
                let k = 1 + task % 3;
                for _ in 0..6 {
                    let permit = semaphore.lock_many(k).await.unwrap();
                    let _: i64 = in_use
                        .key("in-use")
                        .key("most")
                        .arg(k)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _: i64 = dlock::redis::cmd("DECRBY")
                        .arg("in-use")
                        .arg(k)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    permit.unlock().await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
}

#[test]
fn the_weight_held_never_exceeds_n_across_processes() {
    let server = RedisServer::start();
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&me)
                .args(["child_process_takes_weighted_permits", "--exact", "--quiet"])
                .env(CHILD_ENV, server.url())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child process failed");
    }
    let most: i64 = server.cmd(&["GET", "most"]);
    assert!(most <= i64::from(N), "{most} of {N} permits held at once");
    assert!(
        most >= 3,
        "the processes never held more than {most} at once"
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", "procs"]), 0);
}

#[tokio::test]
async fn a_large_request_first_in_line_is_granted_before_smaller_ones_behind_it() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let semaphore = client
        .semaphore_with("pool", N, slow(Wait::NoWait))
        .unwrap();
    let mut small = Vec::new();
    for _ in 0..3 {
        small.push(semaphore.try_lock().await.unwrap());
    }
    let order = Arc::new(StdMutex::new(Vec::new()));
    let wait = slow(Wait::Timeout(Duration::from_secs(10)));
    let (big, log) = (
        client.semaphore_with("pool", N, wait).unwrap(),
        order.clone(),
    );
    let big = tokio::spawn(async move {
        let permit = big.lock_many(N).await.unwrap();
        log.lock().unwrap().push("big");
        tokio::time::sleep(Duration::from_millis(200)).await;
        permit.unlock().await.unwrap();
    });
    queued(&server, "pool", 1).await;
    // One permit is free, but the big request is first in line: the small one queues.
    let (one, log) = (
        client.semaphore_with("pool", N, wait).unwrap(),
        order.clone(),
    );
    let one = tokio::spawn(async move {
        let permit = one.lock().await.unwrap();
        log.lock().unwrap().push("small");
        permit.unlock().await.unwrap();
    });
    queued(&server, "pool", 2).await;
    assert!(matches!(
        semaphore.try_lock().await,
        Err(Error::Busy { .. })
    ));
    // Two free, then three: still not enough for the first in line, and nobody passes it.
    small.pop().unwrap().unlock().await.unwrap();
    small.pop().unwrap().unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "{:?}",
        order.lock().unwrap()
    );
    let released = Instant::now();
    small.pop().unwrap().unlock().await.unwrap();
    big.await.unwrap();
    one.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["big", "small"]);
    // Handed over by the releases, not found by a 20 s re-check.
    assert!(released.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_small_requests_does_not_starve_a_large_one() {
    let server = RedisServer::start();
    let stop = Arc::new(AtomicUsize::new(0));
    let mut stream = Vec::new();
    for task in 0..4u64 {
        let client = Client::connect(&server.url()).await.unwrap();
        let semaphore = client
            .semaphore_with("pool", N, options(Wait::Timeout(Duration::from_secs(30))))
            .unwrap();
        let stop = stop.clone();
        stream.push(tokio::spawn(async move {
            // Staggered holds: some permit is always held, and without queue order a
            // freed permit always has a small taker.
            tokio::time::sleep(Duration::from_millis(7 * task)).await;
            while stop.load(Ordering::SeqCst) == 0 {
                let permit = semaphore.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
                permit.unlock().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let big = client
        .semaphore_with("pool", N, options(Wait::Timeout(Duration::from_secs(5))))
        .unwrap();
    let asked = Instant::now();
    let permit = big
        .lock_many(N)
        .await
        .expect("the large request was starved");
    let took = asked.elapsed();
    assert_eq!(big.held().await.unwrap(), N);
    permit.unlock().await.unwrap();
    stop.store(1, Ordering::SeqCst);
    for task in stream {
        task.await.unwrap();
    }
    assert!(took < Duration::from_secs(2), "granted after {took:?}");
}

#[tokio::test]
async fn a_release_of_k_hands_the_permits_to_a_waiting_k() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let semaphore = client
        .semaphore_with("pool", 3, slow(Wait::NoWait))
        .unwrap();
    let two = semaphore.try_lock_many(2).await.unwrap();
    let one = semaphore.try_lock().await.unwrap();
    assert_eq!(semaphore.held().await.unwrap(), 3);
    // The stored format: a weighted permit's token names its weight, '~extra' the weight
    // beyond one per permit; a weight-1 permit is as before weights.
    assert!(two.token().ends_with("~w2"), "{}", two.token());
    assert!(!one.token().contains("~w"), "{}", one.token());
    assert_eq!(server.cmd::<String>(&["HGET", "pool", "~extra"]), "1");
    let info = client.inspect("pool").await.unwrap();
    let mut weights: Vec<u32> = info.holders.iter().map(|h| h.weight).collect();
    weights.sort();
    assert_eq!(weights, [1, 2]);
    let waiter = client
        .semaphore_with("pool", 3, slow(Wait::Timeout(Duration::from_secs(8))))
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock_many(2).await });
    queued(&server, "pool", 1).await;
    let released = Instant::now();
    two.unlock().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "not handed over"
    );
    assert_eq!(handed.weight(), 2);
    assert_eq!(semaphore.held().await.unwrap(), 3);
    assert!(matches!(
        semaphore.try_lock().await,
        Err(Error::Busy { .. })
    ));
    handed.unlock().await.unwrap();
    let fields: i64 = server.cmd(&["HEXISTS", "pool", "~extra"]);
    assert_eq!(fields, 0, "no '~extra' once only weight-1 permits are held");
    assert_eq!(semaphore.held().await.unwrap(), 1);
    one.unlock().await.unwrap();
}

#[tokio::test]
async fn an_expired_weighted_permit_gives_back_its_whole_weight() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let fixed = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .wait(Wait::NoWait);
    let semaphore = client.semaphore_with("pool", 3, fixed).unwrap();
    let kept = semaphore.try_lock().await.unwrap();
    std::mem::forget(semaphore.try_lock_many(2).await.unwrap());
    assert!(matches!(
        semaphore.try_lock().await,
        Err(Error::Busy { .. })
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    drop(kept);
    let long = client
        .semaphore_with("pool", 3, options(Wait::NoWait))
        .unwrap();
    let all = long
        .try_lock_many(3)
        .await
        .expect("the expired weight is reclaimed");
    assert_eq!(long.held().await.unwrap(), 3);
    all.unlock().await.unwrap();
}

#[tokio::test]
async fn zero_or_more_than_n_permits_are_refused_before_any_request() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let semaphore = client
        .semaphore_with("pool", 3, options(Wait::NoWait))
        .unwrap();
    let before = server.total_calls();
    for result in [
        semaphore.lock_many(0).await,
        semaphore.lock_many(4).await,
        semaphore.try_lock_many(0).await,
        semaphore.lock_many_with(9, Wait::NoWait).await,
    ] {
        match result {
            Err(Error::InvalidArgument(why)) => {
                assert!(
                    why.contains("which has 3") && why.contains("between 1 and 3"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        semaphore.taking(0),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(server.total_calls(), before, "a refusal sent something");
    let all = semaphore.try_lock_many(3).await.unwrap();
    all.unlock().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_lock_many_leaves_nothing_held_and_strands_nobody() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let semaphore = client
        .semaphore_with("pool", 3, slow(Wait::NoWait))
        .unwrap();
    let held = [
        semaphore.try_lock().await.unwrap(),
        semaphore.try_lock().await.unwrap(),
    ];
    let wait = slow(Wait::Timeout(Duration::from_secs(10)));
    let big = client.semaphore_with("pool", 3, wait).unwrap();
    let big = tokio::spawn(async move { big.lock_many(3).await });
    queued(&server, "pool", 1).await;
    // One permit free, but behind the first in line: the small one waits.
    let small = client.semaphore_with("pool", 3, wait).unwrap();
    let small = tokio::spawn(async move { small.lock().await });
    queued(&server, "pool", 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!small.is_finished());
    big.abort();
    assert!(big.await.unwrap_err().is_cancelled());
    let cancelled = Instant::now();
    // The one behind is woken at once (a re-check would come in 20 s).
    let permit = small.await.unwrap().unwrap();
    assert!(cancelled.elapsed() < Duration::from_secs(5));
    assert_eq!(semaphore.held().await.unwrap(), 3, "two and the small one");
    queued(&server, "pool", 0).await;
    assert_eq!(server.cmd::<i64>(&["HEXISTS", "pool", "~extra"]), 0);
    permit.unlock().await.unwrap();
    for permit in held {
        permit.unlock().await.unwrap();
    }
    assert_eq!(server.cmd::<i64>(&["EXISTS", "pool"]), 0);
}

#[test]
fn the_blocking_api_takes_many_permits() {
    let server = RedisServer::start();
    let client = dlock::blocking::Client::connect(&server.url()).unwrap();
    let semaphore = client
        .semaphore_with("pool", 3, options(Wait::NoWait))
        .unwrap();
    let two = semaphore.lock_many(2).unwrap();
    assert_eq!(two.weight(), 2);
    assert_eq!(semaphore.held().unwrap(), 2);
    assert!(matches!(
        semaphore.try_lock_many(2),
        Err(Error::Busy { .. })
    ));
    assert!(matches!(
        semaphore.lock_many(4),
        Err(Error::InvalidArgument(_))
    ));
    let one = semaphore
        .lock_many_with(1, Wait::Timeout(Duration::from_secs(1)))
        .unwrap();
    two.unlock().unwrap();
    one.unlock().unwrap();
    assert_eq!(semaphore.held().unwrap(), 0);
}

/// Takes 2 of 3 and 1, is refused 1 more, hands 2 to a waiting 2: the weighted grant on
/// a topology beyond one server.
async fn weighted_on(first: Client, second: Client) {
    let name = "weighted-pool";
    let semaphore = first.semaphore_with(name, 3, slow(Wait::NoWait)).unwrap();
    let two = semaphore.try_lock_many(2).await.unwrap();
    let one = semaphore.try_lock().await.unwrap();
    assert!(matches!(
        semaphore.try_lock().await,
        Err(Error::Busy { .. })
    ));
    assert_eq!(semaphore.held().await.unwrap(), 3);
    let waiter = second
        .semaphore_with(name, 3, slow(Wait::Timeout(Duration::from_secs(8))))
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock_many(2).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    two.unlock().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_secs(5));
    assert_eq!(semaphore.held().await.unwrap(), 3);
    handed.unlock().await.unwrap();
    one.unlock().await.unwrap();
    assert_eq!(semaphore.held().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_permits_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let connect = || Client::cluster_builder(cluster.urls()).connect();
    weighted_on(connect().await.unwrap(), connect().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_permits_through_sentinel() {
    let group = MasterWithReplicas::start(1);
    let sentinels = SentinelGroup::start(group.master(), "locks", 3);
    let connect = || Client::sentinel_builder(sentinels.urls(), "locks").connect();
    weighted_on(connect().await.unwrap(), connect().await.unwrap()).await;
}

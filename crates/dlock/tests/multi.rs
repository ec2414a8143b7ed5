//! The multi-lock against real servers: every name or none, on one server and across
//! Cluster slots; two multi-locks naming overlapping names in opposite orders never wait
//! for each other; a cancelled wait leaves nothing held; one lease renewed at every key,
//! lost when any key is; waiters of the names (plain and fair) served at its release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::{key_slot, RedisCluster, RedisServer};

fn waiting(timeout: Duration) -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Timeout(timeout))
        // A waiter that polls only at the end of its budget: an early grant was woken.
        .backoff(Duration::from_secs(20), Duration::from_secs(20))
}

fn holder_of(server: &RedisServer, key: &str) -> Option<String> {
    server.cmd(&["GET", key])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_name_or_none_on_one_server() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let blocker = client.mutex("b").unwrap().try_lock().await.unwrap();
    let multi = client.multi_lock(&["a", "b", "c"]).unwrap();
    assert_eq!(multi.kind(), "multi");
    match multi.try_lock().await {
        Err(Error::Busy { name, remaining }) => {
            assert_eq!(name, "a");
            assert!(
                remaining.is_some_and(|r| r > Duration::from_secs(20)),
                "{remaining:?}"
            );
        }
        other => panic!("expected busy, got {other:?}"),
    }
    // Nothing was taken: the free names are still free.
    assert_eq!(holder_of(&server, "a"), None);
    assert_eq!(holder_of(&server, "c"), None);
    blocker.unlock().await.unwrap();

    let guard = multi.try_lock().await.unwrap();
    for key in ["a", "b", "c"] {
        assert_eq!(
            holder_of(&server, key).as_deref(),
            Some(guard.token()),
            "{key}"
        );
    }
    let fences = guard.fences().await.unwrap();
    let names: Vec<&str> = fences.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    for (name, fence) in &fences {
        // Each from its own counter.
        let counter: u64 = server.cmd(&["GET", &format!("{{{name}}}:fence")]);
        assert_eq!(*fence, counter, "{name}");
    }
    assert_eq!(guard.fence().await.unwrap(), fences[0].1);
    // Every exclusive kind of each name is excluded, and excludes the multi-lock back.
    for name in ["a", "b", "c"] {
        assert!(matches!(
            client.mutex(name).unwrap().try_lock().await,
            Err(Error::Busy { .. })
        ));
        assert!(matches!(
            client.fair_mutex(name).unwrap().try_lock().await,
            Err(Error::Busy { .. })
        ));
        let writer = client.rwlock(name).unwrap().writer();
        assert!(matches!(writer.try_lock().await, Err(Error::Busy { .. })));
    }
    assert!(guard.is_held().await.unwrap());
    guard.unlock().await.unwrap();
    for key in ["a", "b", "c"] {
        assert_eq!(holder_of(&server, key), None, "{key}");
    }
    // A second grant draws new fences, larger than the first's.
    let again = multi.try_lock().await.unwrap();
    for ((_, before), (_, after)) in fences.iter().zip(again.fences().await.unwrap()) {
        assert!(after > *before);
    }
    again.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_checked() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for names in [&["a"][..], &["a", "b", "a"][..], &["a", ""][..]] {
        assert!(
            matches!(client.multi_lock(names), Err(Error::InvalidArgument(_))),
            "{names:?}"
        );
    }
    let many: Vec<String> = (0..=dlock::MAX_MULTI_NAMES)
        .map(|i| format!("n{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(matches!(
        client.multi_lock(&many),
        Err(Error::InvalidArgument(_))
    ));
    assert!(client.multi_lock(&many[1..]).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_any_name_wakes_the_waiter() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    for held in ["x", "y"] {
        let blocker = other.mutex(held).unwrap().try_lock().await.unwrap();
        let multi = client
            .multi_lock_with(&["x", "y"], waiting(Duration::from_secs(15)))
            .unwrap();
        let waiter = tokio::spawn(async move {
            let guard = multi.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        blocker.unlock().await.unwrap();
        let granted = waiter.await.unwrap();
        assert!(
            granted.duration_since(released) < Duration::from_secs(3),
            "woken by {held}'s release: {:?}",
            granted.duration_since(released)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_of_a_name_is_handed_it_at_the_release() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client
        .multi_lock(&["p", "q"])
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let fair = client
        .fair_mutex_with("q", waiting(Duration::from_secs(15)))
        .unwrap();
    let waiter = tokio::spawn(async move { fair.lock().await.unwrap() });
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cmd::<i64>(&["ZCARD", "{q}:queue"]) != 1 {
        assert!(Instant::now() < deadline, "the fair waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let token = guard.token().to_string();
    guard.unlock().await.unwrap();
    let handed = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("handed the name at the release")
        .unwrap();
    assert_ne!(handed.token(), token);
    assert_eq!(holder_of(&server, "q").as_deref(), Some(handed.token()));
    assert_eq!(holder_of(&server, "p"), None);
    handed.unlock().await.unwrap();
}

/// Two tasks (on two clients) take the same two names many times, naming them in
/// opposite orders; `overlaps` counts a hold that began while the other's was on.
async fn opposite_orders(
    first: Client,
    second: Client,
    names: [&str; 2],
    rounds: usize,
) -> (usize, Duration) {
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (client, names) in [
        (first, [names[0], names[1]]),
        (second, [names[1], names[0]]),
    ] {
        let multi = client
            .multi_lock_with(
                &names,
                LockOptions::default()
                    .ttl(Duration::from_secs(30))
                    .wait(Wait::Timeout(Duration::from_secs(20))),
            )
            .unwrap();
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = multi.lock().await.unwrap();
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    (overlaps.load(Ordering::SeqCst), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock_on_one_server() {
    let server = RedisServer::start();
    let first = Client::connect(&server.url()).await.unwrap();
    let second = Client::connect(&server.url()).await.unwrap();
    let (overlaps, took) = opposite_orders(first, second, ["left", "right"], 40).await;
    assert_eq!(overlaps, 0);
    // A deadlock would last a lease (30 s).
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_nothing_held() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let blocker = client.mutex("m2").unwrap().try_lock().await.unwrap();
    let multi = client
        .multi_lock_with(&["m1", "m2"], waiting(Duration::from_secs(30)))
        .unwrap();
    // Dropped mid-wait by a timeout of the caller's.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), multi.lock())
            .await
            .is_err()
    );
    // Dropped after its attempts have been sent many times over.
    for after in [0, 1, 2, 5, 10] {
        let _ = tokio::time::timeout(Duration::from_millis(after), multi.lock()).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(holder_of(&server, "m1"), None);
    assert_eq!(holder_of(&server, "m2").as_deref(), Some(blocker.token()));
    blocker.unlock().await.unwrap();
    // And a wait dropped while the names are free may have been granted: given back.
    for after in [0, 1, 2, 3] {
        let _ = tokio::time::timeout(Duration::from_millis(after), multi.lock()).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(holder_of(&server, "m1"), None);
    assert_eq!(holder_of(&server, "m2"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_every_key_and_one_lost_key_fires_the_lost_signal() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let ttl = Duration::from_millis(300);
    let multi = client
        .multi_lock_with(&["r1", "r2", "r3"], LockOptions::default().renewed(ttl))
        .unwrap();
    let guard = multi.try_lock().await.unwrap();
    tokio::time::sleep(ttl * 5).await;
    for key in ["r1", "r2", "r3"] {
        assert_eq!(
            holder_of(&server, key).as_deref(),
            Some(guard.token()),
            "{key} renewed"
        );
    }
    assert!(guard.lost_signal().lost().is_none());
    // One key deleted by hand: the next renewal finds it gone.
    let _: i64 = server.cmd(&["DEL", "r3"]);
    let reason = tokio::time::timeout(ttl * 3, guard.lost())
        .await
        .expect("the lost signal fires");
    assert_eq!(reason, dlock::LostReason::Taken);
    assert!(!guard.is_held().await.unwrap());
    assert!(matches!(guard.unlock().await, Err(Error::Lost { .. })));
    // The names still held were given back all the same.
    assert_eq!(holder_of(&server, "r1"), None);
    assert_eq!(holder_of(&server, "r2"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_and_release_by_token_act_on_every_name() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let multi = client
        .multi_lock_with(
            &["e1", "e2"],
            LockOptions::default().ttl(Duration::from_secs(5)),
        )
        .unwrap();
    let token = multi.try_lock().await.unwrap().into_token();
    multi
        .extend_token(&token, Duration::from_secs(60))
        .await
        .unwrap();
    for key in ["e1", "e2"] {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        assert!(pttl > 50_000, "{key}: {pttl}");
    }
    multi.release_token(&token).await.unwrap();
    assert_eq!(holder_of(&server, "e1"), None);
    assert_eq!(holder_of(&server, "e2"), None);
    assert!(matches!(
        multi.release_token(&token).await,
        Err(Error::Lost { .. })
    ));
}

#[test]
fn the_blocking_api_takes_every_name() {
    let server = RedisServer::start();
    let client = dlock::blocking::Client::connect(&server.url()).unwrap();
    let guard = client.multi_lock(&["k1", "k2"]).unwrap().lock().unwrap();
    assert_eq!(guard.fences().unwrap().len(), 2);
    assert!(matches!(
        client.mutex("k2").unwrap().try_lock(),
        Err(Error::Busy { .. })
    ));
    guard.unlock().unwrap();
    assert_eq!(holder_of(&server, "k1"), None);
}

/// Two names on different masters of `cluster`.
fn names_in_two_slots(cluster: &RedisCluster) -> [String; 2] {
    let first = "acct-0".to_string();
    let master = cluster.master_for_slot(key_slot(&first));
    let second = (1..)
        .map(|i| format!("acct-{i}"))
        .find(|name| cluster.master_for_slot(key_slot(name)) != master)
        .unwrap();
    [first, second]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_cluster_slots_every_name_or_none() {
    let cluster = RedisCluster::start(3, 0);
    let connect = || Client::cluster_builder(cluster.urls()).connect();
    let client = connect().await.unwrap();
    let [a, b] = names_in_two_slots(&cluster);
    let get = |key: &str| -> Option<String> {
        let master = cluster.master_for_slot(key_slot(key));
        cluster.masters()[master].cmd(&["GET", key])
    };
    // Whichever slot is taken first, a busy one leaves the other free.
    for busy in [&a, &b] {
        let blocker = client.mutex(busy).unwrap().try_lock().await.unwrap();
        let multi = client.multi_lock(&[a.as_str(), b.as_str()]).unwrap();
        assert!(matches!(multi.try_lock().await, Err(Error::Busy { .. })));
        let free = if busy == &a { &b } else { &a };
        assert_eq!(get(free), None, "{free} given back");
        // A cancelled wait across slots leaves nothing held either.
        let waiting = client
            .multi_lock_with(&[b.as_str(), a.as_str()], waiting(Duration::from_secs(30)))
            .unwrap();
        for after in [0, 1, 2, 5, 50] {
            let _ = tokio::time::timeout(Duration::from_millis(after), waiting.lock()).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(get(free), None, "{free} left free by cancelled waits");
        blocker.unlock().await.unwrap();
    }
    let guard = client
        .multi_lock(&[a.as_str(), b.as_str()])
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert_eq!(get(&a).as_deref(), Some(guard.token()));
    assert_eq!(get(&b).as_deref(), Some(guard.token()));
    assert_eq!(guard.fences().await.unwrap().len(), 2);
    guard.unlock().await.unwrap();
    assert_eq!((get(&a), get(&b)), (None, None));

    let (overlaps, took) = opposite_orders(
        connect().await.unwrap(),
        connect().await.unwrap(),
        [&a, &b],
        30,
    )
    .await;
    assert_eq!(overlaps, 0);
    assert!(took < Duration::from_secs(15), "{took:?}");

    // Renewed on both shards under one lease; one name deleted there fires the signal.
    let ttl = Duration::from_millis(300);
    let renewed = client
        .multi_lock_with(
            &[a.as_str(), b.as_str()],
            LockOptions::default().renewed(ttl),
        )
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    tokio::time::sleep(ttl * 5).await;
    assert_eq!(get(&a).as_deref(), Some(renewed.token()));
    assert_eq!(get(&b).as_deref(), Some(renewed.token()));
    assert!(renewed.lost_signal().lost().is_none());
    let master = cluster.master_for_slot(key_slot(&b));
    let _: i64 = cluster.masters()[master].cmd(&["DEL", &b]);
    let reason = tokio::time::timeout(ttl * 3, renewed.lost()).await;
    assert_eq!(reason.ok(), Some(dlock::LostReason::Taken));
    drop(renewed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_sentinel_master_every_name_or_none() {
    let master = RedisServer::start();
    let sentinels = dlock_testkit::SentinelGroup::start(&master, "locks", 1);
    let client = Client::sentinel_builder(sentinels.urls(), "locks")
        .connect()
        .await
        .unwrap();
    let blocker = client.mutex("s2").unwrap().try_lock().await.unwrap();
    let multi = client.multi_lock(&["s1", "s2"]).unwrap();
    assert!(matches!(multi.try_lock().await, Err(Error::Busy { .. })));
    assert_eq!(holder_of(&master, "s1"), None);
    blocker.unlock().await.unwrap();
    let guard = multi.try_lock().await.unwrap();
    assert_eq!(holder_of(&master, "s1").as_deref(), Some(guard.token()));
    assert_eq!(holder_of(&master, "s2").as_deref(), Some(guard.token()));
    guard.unlock().await.unwrap();
    assert_eq!(
        (holder_of(&master, "s1"), holder_of(&master, "s2")),
        (None, None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writes_are_refused_on_a_multi_lock() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client
        .multi_lock(&["g1", "g2"])
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let batch = dlock::Guarded::new().set("k", "v");
    match guard.apply(&batch).await {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("multi-lock"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    guard.unlock().await.unwrap();
}

//! The fair (FIFO) mutex against a real redis-server.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::RedisServer;

fn options(wait: Wait) -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_secs(10))
        .wait(wait)
        .waiter_lease(Duration::from_millis(600))
}

async fn wait_for_queue_len(server: &RedisServer, key: &str, len: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cmd::<i64>(&["ZCARD", key]) != len {
        assert!(Instant::now() < deadline, "queue {key} never reached {len}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_arrival_order() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client
        .fair_mutex_with("job", options(Wait::NoWait))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for index in 0..20 {
        // Several clients, so the order is Redis's, not one client's.
        let client = Client::connect(&server.url()).await.unwrap();
        let mutex = client
            .fair_mutex_with("job", options(Wait::Timeout(Duration::from_secs(30))))
            .unwrap();
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            order.lock().unwrap().push(index);
            tokio::time::sleep(Duration::from_millis(2)).await;
            guard.unlock().await.unwrap();
        }));
        wait_for_queue_len(&server, "{job}:queue", index + 1).await;
    }
    holder.unlock().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    let left: i64 = server.cmd(&["EXISTS", "{job}:queue", "{job}:queue-leases"]);
    assert_eq!(left, 0, "the queue is gone once empty");
}

#[tokio::test]
async fn a_vanished_waiter_is_skipped_after_its_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client
        .fair_mutex_with("job", options(Wait::NoWait))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    // A waiter that queued and then died: its place exists, nobody listens for its turn.
    let acquire = redis::Script::new(concat!(
        include_str!("../src/queue/queue.lua"),
        include_str!("../src/fair/acquire.lua")
    ));
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let reply: Vec<i64> = acquire
        .key("job")
        .key("{job}:fence")
        .key("{job}:queue")
        .key("{job}:queue-leases")
        .arg("dead-waiter")
        .arg(10_000)
        .arg(500)
        .arg("dlock:wake:job:")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        reply,
        vec![0, reply[1], 0],
        "the dead waiter is first in line"
    );
    let mutex = client
        .fair_mutex_with("job", options(Wait::Timeout(Duration::from_secs(10))))
        .unwrap();
    let waiting = tokio::spawn(async move { mutex.lock().await });
    wait_for_queue_len(&server, "{job}:queue", 2).await;
    holder.unlock().await.unwrap();
    let guard = waiting
        .await
        .unwrap()
        .expect("granted once the dead waiter's lease ended");
    let queued: Vec<String> = server.cmd(&["ZRANGE", "{job}:queue", "0", "-1"]);
    assert!(queued.is_empty(), "{queued:?}");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_no_trace() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let holder = client
        .fair_mutex_with("job", options(Wait::NoWait))
        .unwrap()
        .try_lock()
        .await
        .unwrap();

    // Timed out.
    let timed = client
        .fair_mutex_with("job", options(Wait::Timeout(Duration::from_millis(300))))
        .unwrap();
    assert!(matches!(timed.lock().await, Err(Error::TimedOut { .. })));
    let left: i64 = server.cmd(&["EXISTS", "{job}:queue", "{job}:queue-leases"]);
    assert_eq!(left, 0, "a timed-out waiter left its place behind");

    // Busy single attempt.
    assert!(matches!(timed.try_lock().await, Err(Error::Busy { .. })));
    let left: i64 = server.cmd(&["EXISTS", "{job}:queue", "{job}:queue-leases"]);
    assert_eq!(left, 0, "try_lock left a place behind");

    // The waiting future dropped.
    let forever = client
        .fair_mutex_with("job", options(Wait::Forever))
        .unwrap();
    let task = tokio::spawn(async move { forever.lock().await });
    wait_for_queue_len(&server, "{job}:queue", 1).await;
    task.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["EXISTS", "{job}:queue", "{job}:queue-leases"]) != 0 {
        assert!(
            Instant::now() < deadline,
            "a dropped waiter left its place behind"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.unlock().await.unwrap();
}

#[tokio::test]
async fn a_fair_lock_interoperates_with_the_plain_mutex_format() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let fair = client
        .fair_mutex_with("job", options(Wait::NoWait))
        .unwrap();
    let guard = fair.try_lock().await.unwrap();
    let stored: String = server.cmd(&["GET", "job"]);
    assert_eq!(stored, guard.token());
    assert!(matches!(
        client.mutex("job").unwrap().try_lock().await,
        Err(Error::Busy { .. })
    ));
    guard.unlock().await.unwrap();
}

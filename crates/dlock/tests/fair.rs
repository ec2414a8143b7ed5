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

#[test]
fn a_killed_waiter_is_skipped_after_its_lease() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(Client::connect(&server.url())).unwrap();
    let holder = runtime
        .block_on(
            client
                .fair_mutex_with("job", options(Wait::NoWait))
                .unwrap()
                .try_lock(),
        )
        .unwrap();

    // A waiter in a runtime of its own that dies while queued: its runtime stops without
    // running any cleanup, as when its process is killed.
    let doomed_runtime = tokio::runtime::Runtime::new().unwrap();
    let doomed = doomed_runtime
        .block_on(Client::connect(&server.url()))
        .unwrap();
    let doomed_lock = doomed
        .fair_mutex_with(
            "job",
            options(Wait::Forever).waiter_lease(Duration::from_millis(500)),
        )
        .unwrap();
    doomed_runtime.spawn(async move { doomed_lock.lock().await });
    runtime.block_on(wait_for_queue_len(&server, "{job}:queue", 1));
    doomed_runtime.shutdown_background();
    drop(doomed);

    let survivor = client
        .fair_mutex_with("job", options(Wait::Timeout(Duration::from_secs(10))))
        .unwrap();
    let waiting = runtime.spawn(async move { survivor.lock().await });
    runtime.block_on(wait_for_queue_len(&server, "{job}:queue", 2));
    runtime.block_on(holder.unlock()).unwrap();
    let guard = runtime
        .block_on(waiting)
        .unwrap()
        .expect("granted once the dead waiter's lease ended");
    let queued: Vec<String> = server.cmd(&["ZRANGE", "{job}:queue", "0", "-1"]);
    assert!(
        queued.is_empty(),
        "the dead waiter was dropped from the queue: {queued:?}"
    );
    runtime.block_on(guard.unlock()).unwrap();
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

//! The blocking API: threads instead of tasks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::blocking::Client;
use dlock::{Error, LockOptions, Owner, Wait};
use dlock_testkit::RedisServer;

fn run_threads(server: &RedisServer, locked: bool) -> u64 {
    let client = Client::connect(&server.url()).unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let mutex = client.mutex("counter").unwrap();
            let counter = counter.clone();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let guard = locked.then(|| mutex.lock().unwrap());
                    // A non-atomic read-modify-write with a pause in the middle.
                    let value = counter.load(Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                    counter.store(value + 1, Ordering::SeqCst);
                    drop(guard); // releases synchronously
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    counter.load(Ordering::SeqCst)
}

#[test]
fn threads_are_mutually_excluded() {
    let server = RedisServer::start();
    assert_eq!(run_threads(&server, true), 80);
}

#[test]
fn negative_control_unlocked_threads_lose_updates() {
    let server = RedisServer::start();
    assert!(run_threads(&server, false) < 80);
}

#[test]
fn timeouts_busy_and_release_on_drop() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let holder = client.mutex("job").unwrap().lock().unwrap();
    assert_eq!(
        holder.drawn_fence(),
        None,
        "a plain mutex draws on first read"
    );
    let holder_fence = holder.fence().unwrap();
    let waiter = client
        .mutex_with(
            "job",
            LockOptions::default().wait(Wait::Timeout(Duration::from_millis(300))),
        )
        .unwrap();
    assert!(matches!(waiter.lock(), Err(Error::TimedOut { .. })));
    assert!(matches!(waiter.try_lock(), Err(Error::Busy { .. })));
    assert!(holder.is_held().unwrap());
    assert_eq!(holder.lost(), None);
    drop(holder);
    let held: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(held, None, "drop released before returning");
    let value = waiter.with_lock(|guard| guard.fence().unwrap()).unwrap();
    assert!(value > holder_fence);
}

#[test]
fn blocking_reentrant_mutex() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let mutex = client.reentrant_mutex("ledger").unwrap();
    let owner = Owner::new();
    let outer = mutex.for_owner(&owner).lock().unwrap();
    let inner = mutex.for_owner(&owner).lock().unwrap();
    assert_eq!(inner.holds_at_grant(), 2);
    inner.unlock().unwrap();
    assert_eq!(mutex.for_owner(&owner).hold_count().unwrap(), 1);
    assert!(matches!(
        mutex.for_owner(&Owner::new()).try_lock(),
        Err(Error::Busy { .. })
    ));
    drop(outer);
    assert_eq!(mutex.for_owner(&owner).hold_count().unwrap(), 0);
}

#[test]
fn blocking_fair_mutex_semaphore_and_rwlock() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let no_wait = LockOptions::default().wait(Wait::NoWait);

    let fair = client.fair_mutex_with("fair", no_wait).unwrap();
    let held = fair.lock().unwrap();
    assert!(matches!(fair.try_lock(), Err(Error::Busy { .. })));
    held.unlock().unwrap();

    let pool = client.semaphore_with("pool", 2, no_wait).unwrap();
    let a = pool.lock().unwrap();
    let b = pool.try_lock().unwrap();
    assert!(matches!(pool.try_lock(), Err(Error::Busy { .. })));
    assert_eq!(pool.held().unwrap(), 2);
    drop(a); // gives the permit back before returning
    assert_eq!(pool.held().unwrap(), 1);
    b.unlock().unwrap();

    let config = client.rwlock_with("config", no_wait).unwrap();
    let (me, you) = (Owner::new(), Owner::new());
    let r1 = config.for_owner(&me).read().unwrap();
    let r2 = config.for_owner(&you).try_read().unwrap();
    assert_eq!(config.readers().unwrap(), 2);
    assert!(matches!(config.try_write(), Err(Error::Busy { .. })));
    drop(r1);
    r2.unlock().unwrap();
    let w = config.write().unwrap();
    let r = w.downgrade().unwrap();
    assert_eq!(config.readers().unwrap(), 1);
    r.unlock().unwrap();
}

/// The blocking Redlock: threads of one process take turns on one Redlock mutex, never
/// two at once, each grant's fence above the last; `with_lock` and the lost iterator work
/// as for a single server.
#[test]
fn blocking_redlock_threads_exclude_each_other() {
    let masters = dlock_testkit::IndependentMasters::start(3);
    let redlock = dlock::blocking::Redlock::connect(masters.urls()).unwrap();
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let last_fence = std::sync::Arc::new(std::sync::Mutex::new(0u64));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (redlock, inside, last_fence) =
                (redlock.clone(), inside.clone(), last_fence.clone());
            std::thread::spawn(move || {
                let mutex = redlock.mutex("blocking-redlock").unwrap();
                for _ in 0..5 {
                    let guard = mutex.lock().unwrap();
                    assert!(!inside.swap(true, std::sync::atomic::Ordering::SeqCst));
                    let fence = guard.fence().unwrap();
                    {
                        let mut last = last_fence.lock().unwrap();
                        assert!(fence > *last, "{fence} after {}", *last);
                        *last = fence;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    inside.store(false, std::sync::atomic::Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mutex = redlock.mutex("blocking-redlock").unwrap();
    let fence = mutex.with_lock(|guard| guard.fence().unwrap()).unwrap();
    assert!(fence > *last_fence.lock().unwrap());
    let any = mutex.clone().into_any();
    let guard = any.try_lock().unwrap();
    assert!(guard.is_held().unwrap());
    drop(guard);
    let mut lost = redlock.lost();
    redlock.shutdown();
    redlock.done();
    assert!(lost.next().is_none());
}

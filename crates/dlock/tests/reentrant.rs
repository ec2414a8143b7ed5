//! The reentrant mutex against a real redis-server.

use std::time::Duration;

use dlock::{Client, Error, LockOptions, LostReason, Owner, Wait};
mod common;

use dlock_testkit::RedisServer;

fn options() -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_secs(5))
        .wait(Wait::NoWait)
}

#[tokio::test]
async fn the_same_owner_reenters_and_the_lock_frees_at_zero() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.reentrant_mutex_with("ledger", options()).unwrap();
    let owner = Owner::new();
    let first = mutex.for_owner(&owner).try_lock().await.unwrap();
    let second = mutex.for_owner(&owner).try_lock().await.unwrap();
    let third = mutex.for_owner(&owner).lock().await.unwrap();
    assert_eq!(
        (
            first.holds_at_grant(),
            second.holds_at_grant(),
            third.holds_at_grant()
        ),
        (1, 2, 3)
    );
    assert_eq!(mutex.for_owner(&owner).hold_count().await.unwrap(), 3);
    third.unlock().await.unwrap();
    assert_eq!(mutex.for_owner(&owner).hold_count().await.unwrap(), 2);
    second.unlock().await.unwrap();
    assert_eq!(mutex.for_owner(&owner).hold_count().await.unwrap(), 1);
    let exists: i64 = server.cmd(&["EXISTS", "ledger"]);
    assert_eq!(exists, 1, "still held with one hold left");
    first.unlock().await.unwrap();
    assert_eq!(mutex.for_owner(&owner).hold_count().await.unwrap(), 0);
    let exists: i64 = server.cmd(&["EXISTS", "ledger"]);
    assert_eq!(exists, 0, "released at zero");
}

#[tokio::test]
async fn other_owners_are_excluded_and_wrong_owner_releases_refused() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.reentrant_mutex_with("ledger", options()).unwrap();
    let (alice, bob) = (Owner::new(), Owner::new());
    let held = mutex.for_owner(&alice).try_lock().await.unwrap();
    assert!(matches!(
        mutex.for_owner(&bob).try_lock().await,
        Err(Error::Busy { .. })
    ));
    assert!(matches!(
        mutex.for_owner(&bob).release_one().await,
        Err(Error::Lost { .. })
    ));
    assert_eq!(
        mutex.for_owner(&alice).hold_count().await.unwrap(),
        1,
        "intact after bob's refusal"
    );
    assert_eq!(mutex.for_owner(&bob).hold_count().await.unwrap(), 0);

    // Bob waits; Alice's release wakes him.
    let waiting = {
        let mutex = client
            .reentrant_mutex_with(
                "ledger",
                options().wait(Wait::Timeout(Duration::from_secs(10))),
            )
            .unwrap();
        let bob = bob.clone();
        tokio::spawn(async move { mutex.for_owner(&bob).lock().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fence = held.fence().await.unwrap();
    held.unlock().await.unwrap();
    let bobs = waiting.await.unwrap().unwrap();
    assert!(bobs.fence().await.unwrap() > fence);
    bobs.unlock().await.unwrap();
}

#[tokio::test]
async fn fencing_is_drawn_once_per_outermost_grant() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.reentrant_mutex_with("ledger", options()).unwrap();
    let owner = Owner::new();
    let outer = mutex.for_owner(&owner).try_lock().await.unwrap();
    let inner = mutex.for_owner(&owner).try_lock().await.unwrap();
    assert_eq!(inner.fence().await.unwrap(), outer.fence().await.unwrap());
    let first_fence = outer.fence().await.unwrap();
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let again = mutex.for_owner(&owner).try_lock().await.unwrap();
    assert!(again.fence().await.unwrap() > first_fence);
    let counter: u64 = server.cmd(&["GET", "{ledger}:fence"]);
    assert_eq!(counter, again.fence().await.unwrap());
}

#[tokio::test]
async fn a_resent_acquire_request_counts_once() {
    let server = RedisServer::start();
    let conn = common::raw_conn(&server).await;
    let acquire = common::script(&["reentrant/acquire.lua"]);
    let call = |request: &'static str| {
        let mut invocation = acquire.prepare_invoke();
        invocation
            .key("ledger")
            .key("{ledger}:fence")
            .arg("owner-a")
            .arg(10_000)
            .arg(request);
        let mut conn = conn.clone();
        async move {
            invocation
                .invoke_async::<Vec<i64>>(&mut conn)
                .await
                .unwrap()
        }
    };
    let first = call("req-1").await;
    let fence = first[1];
    assert_eq!(first, vec![1, fence, 1]);
    assert_eq!(
        call("req-1").await,
        vec![1, fence, 1],
        "the resend is not a second hold"
    );
    assert_eq!(
        call("req-2").await,
        vec![1, fence, 2],
        "a new request re-enters"
    );
}

#[tokio::test]
async fn renewal_and_lost_signal_work_for_reentrant_holds() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client
        .reentrant_mutex_with("ledger", options().renewed(Duration::from_millis(300)))
        .unwrap();
    let owner = Owner::new();
    let guard = mutex.for_owner(&owner).try_lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        mutex.for_owner(&owner).hold_count().await.unwrap(),
        1,
        "renewed past three leases"
    );
    let _: i64 = server.cmd(&["DEL", "ledger"]);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::Taken);
}

#[tokio::test]
async fn foreign_values_at_the_key_are_wrong_type() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let owner = Owner::new();
    let _: () = server.cmd(&["SET", "plain", "value"]);
    let _: i64 = server.cmd(&["HSET", "foreign", "field", "value"]);
    for name in ["plain", "foreign"] {
        let mutex = client.reentrant_mutex_with(name, options()).unwrap();
        assert!(
            matches!(
                mutex.for_owner(&owner).try_lock().await,
                Err(Error::WrongType { .. })
            ),
            "{name}"
        );
    }
    let fields: Vec<String> = server.cmd(&["HKEYS", "foreign"]);
    assert_eq!(fields, vec!["field"], "the foreign hash was not written to");
}

/// Handles are cloned into tasks as a matter of course: a clone acts for an owner of its
/// own, so tasks given clones exclude each other; acting for the same owner is explicit.
/// The same for an rwlock's readers: clones are distinct readers, and one behind a waiting
/// writer waits.
#[tokio::test]
async fn a_clone_acts_for_a_fresh_owner_and_for_owner_for_the_same() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.reentrant_mutex_with("pool", options()).unwrap();
    let held = mutex.try_lock().await.unwrap();
    let clone = mutex.clone();
    assert_ne!(clone.owner(), mutex.owner());
    assert!(
        matches!(clone.try_lock().await, Err(Error::Busy { .. })),
        "a clone handed to another task re-entered its original's hold"
    );
    // Negative control: the same owner, asked for explicitly, re-enters.
    let same = mutex.for_owner(mutex.owner());
    let again = same.try_lock().await.unwrap();
    assert_eq!(again.holds_at_grant(), 2);
    assert_eq!(mutex.hold_count().await.unwrap(), 2);
    assert_eq!(clone.hold_count().await.unwrap(), 0);
    again.unlock().await.unwrap();
    held.unlock().await.unwrap();

    let rwlock = client.rwlock_with("config", options()).unwrap();
    let first = rwlock.read().await.unwrap();
    let second = rwlock.clone().read().await.unwrap();
    assert_eq!(
        rwlock.readers().await.unwrap(),
        2,
        "clones read as distinct owners"
    );
    // A writer queues; a clone's read now waits behind it, the original's re-enters.
    let waiting = rwlock.clone();
    let writer = tokio::spawn(async move {
        waiting
            .writer()
            .lock_with(Wait::Timeout(Duration::from_secs(10)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        rwlock.clone().try_read().await,
        Err(Error::Busy { .. })
    ));
    let reentered = rwlock.try_read().await.unwrap();
    // The read side as an AnyLock keeps the handle's owner: it re-enters too.
    let any: dlock::AnyLock = rwlock.reader().into();
    let through_any = any.try_lock().await.unwrap();
    through_any.unlock().await.unwrap();
    for guard in [first, second, reentered] {
        guard.unlock().await.unwrap();
    }
    writer.await.unwrap().unwrap().unlock().await.unwrap();
}

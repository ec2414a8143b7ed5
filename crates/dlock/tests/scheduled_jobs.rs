//! What a job started on every replica needs. `LockOptions::hold_at_least`: a hold given back early (unlock, drop, shutdown) keeps the
//! lock until the least time after its grant, then frees by itself and its waiters are told
//! (they do not sleep out the old lease); a hold that lasted longer frees at once. Every
//! kind, Redlock, a Cluster and the blocking API; the negative control is the same wait
//! without the option, granted at once. `Guard::record_success`/`last_success`: written
//! only while held, read by Redis's clock, a foreign value ignored.

use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Owner, Wait};
use dlock_testkit::{
    IndependentMasters, MasterWithReplicas, RedisCluster, RedisServer, SentinelGroup,
};

mod common;
use common::{take, Kind, KINDS};

const LEAST: Duration = Duration::from_millis(800);

/// A renewed 30 s lease (the default) that keeps the lock at least [`LEAST`].
fn lingering() -> LockOptions {
    LockOptions::default()
        .hold_at_least(LEAST)
        .wait(Wait::Timeout(Duration::from_secs(10)))
}

/// Waits long: a waiter that was not told of the shortened lease sleeps until its wait's
/// last attempt (or the old 30 s lease), [`TOLD`] and more after the give-back.
fn waiting() -> LockOptions {
    LockOptions::default().wait(Wait::Timeout(Duration::from_secs(20)))
}

/// A waiter that was told is granted within this (the least time, and ample room for a
/// loaded machine); one that was not sleeps until the old lease ends, or a queued one
/// until it refreshes its place (a third of its 30 s waiter lease): see
/// `a_waiter_not_told_of_a_shortened_lease_sleeps_past_it`.
const TOLD: Duration = Duration::from_secs(5);

/// What a hold of `kind` keeps out: another of its kind, or for a read hold a writer. (A
/// semaphore's two permits are both taken by the holder.)
fn contender(kind: Kind) -> Kind {
    match kind {
        Kind::Read => Kind::Write,
        other => other,
    }
}

/// Takes what a hold of `kind` must keep out: for a semaphore of 2, both permits.
async fn hold(client: &Client, kind: Kind, name: &str, options: LockOptions) -> Vec<common::Held> {
    let mut held = vec![take(client, kind, name, options, true).await.unwrap()];
    if kind == Kind::Permit {
        held.push(take(client, kind, name, options, true).await.unwrap());
    }
    held
}

/// Holds `kind` on `name` with `options`, has a waiter of `other` wait for it (already
/// waiting when the hold is given back, so it must be told of the new end), gives the hold
/// back by `unlock` or `drop`, and answers how long after the first grant the waiter
/// was granted.
async fn give_back_while_waited_for(
    holder: &Client,
    other: &Client,
    kind: Kind,
    name: &str,
    options: LockOptions,
    how: &str,
) -> Duration {
    let before = Instant::now();
    let held = hold(holder, kind, name, options).await;
    let (other, name) = (other.clone(), name.to_string());
    let waiter =
        tokio::spawn(async move { take(&other, contender(kind), &name, waiting(), false).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "{kind:?}: granted while held");
    for guard in held {
        match how {
            "unlock" => guard.unlock().await.unwrap(),
            _ => drop(guard),
        }
    }
    let granted = waiter.await.unwrap();
    assert!(granted.is_ok(), "{kind:?} given back by {how}: {granted:?}");
    let after = before.elapsed();
    assert!(
        after < TOLD,
        "{kind:?} given back by {how}: granted after {after:?}: not told"
    );
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_given_back_early_stays_held_until_the_least_time_and_its_waiter_is_told() {
    let server = RedisServer::start();
    let holder = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    for kind in KINDS {
        for how in ["unlock", "drop"] {
            let name = format!("job-{kind:?}-{how}");
            let after = give_back_while_waited_for(&holder, &other, kind, &name, lingering(), how);
            let after = after.await;
            assert!(after >= LEAST, "{kind:?} by {how}: granted {after:?} after");
        }
        // The negative control: without the option the waiter is granted at once.
        let name = format!("job-{kind:?}-at-once");
        let after = give_back_while_waited_for(&holder, &other, kind, &name, waiting(), "unlock");
        let after = after.await;
        assert!(
            after < LEAST,
            "{kind:?} without the option: {after:?}: slow machine?"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_longer_than_the_least_time_frees_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default().hold_at_least(Duration::from_millis(100));
    let mutex = client.mutex_with("long-job", options).unwrap();
    let guard = mutex.try_lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "long-job"]), 0);
    // And one given back early keeps its key exactly until the least time.
    let mutex = client
        .mutex_with("short-job", LockOptions::default().hold_at_least(LEAST))
        .unwrap();
    mutex.try_lock().await.unwrap().unlock().await.unwrap();
    let left: i64 = server.cmd(&["PTTL", "short-job"]);
    assert!(
        left > 0 && left <= LEAST.as_millis() as i64,
        "{left} ms left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_keeps_the_lock_until_the_least_time() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("cron", lingering()).unwrap();
    let guard = mutex.lock().await.unwrap();
    client.shutdown().await;
    let left: i64 = server.cmd(&["PTTL", "cron"]);
    assert!(
        left > 0 && left <= LEAST.as_millis() as i64,
        "{left} ms left"
    );
    drop(guard); // released at shutdown already: nothing more happens
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after: i64 = server.cmd(&["PTTL", "cron"]);
    assert!(after > 0 && after <= left, "{after} ms left after the drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_owner_keeps_the_lock_through_its_other_holds_and_the_last_one_lingers() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.reentrant_mutex_with("nested", lingering()).unwrap();
    let owner = Owner::new();
    let outer = mutex.for_owner(&owner).lock().await.unwrap();
    let inner = mutex.for_owner(&owner).lock().await.unwrap();
    inner.unlock().await.unwrap();
    // Given back at once: the count is 1 and the outer hold's 30 s lease stands.
    assert_eq!(server.cmd::<String>(&["HGET", "nested", "count"]), "1");
    assert!(server.cmd::<i64>(&["PTTL", "nested"]) > 20_000);
    outer.unlock().await.unwrap();
    let left: i64 = server.cmd(&["PTTL", "nested"]);
    assert!(
        left > 0 && left <= LEAST.as_millis() as i64,
        "{left} ms left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_before_its_give_back_is_reported_lost_and_nothing_is_touched() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("taken", lingering()).unwrap();
    let guard = mutex.lock().await.unwrap();
    let _: () = server.cmd(&["SET", "taken", "someone-else"]);
    assert!(matches!(guard.unlock().await, Err(Error::Lost { .. })));
    assert_eq!(server.cmd::<String>(&["GET", "taken"]), "someone-else");
    assert_eq!(server.cmd::<i64>(&["PTTL", "taken"]), -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_absurd_least_times_are_refused() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for least in [Duration::ZERO, Duration::from_secs(25 * 3600)] {
        let options = LockOptions::default().hold_at_least(least);
        let made = client.mutex_with("x", options);
        let Err(Error::InvalidArgument(said)) = made else {
            panic!("{least:?} accepted: {made:?}");
        };
        assert!(said.contains("hold_at_least"), "{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_given_back_early_stays_held_on_its_majority_until_the_least_time() {
    let masters = IndependentMasters::start(3);
    let first = Client::redlock(masters.urls()).await.unwrap();
    let second = Client::redlock(masters.urls()).await.unwrap();
    let before = Instant::now();
    let guard = first
        .mutex_with("report", lingering())
        .unwrap()
        .lock()
        .await;
    guard.unwrap().unlock().await.unwrap();
    // Done once a majority lingered; the last master's request ends in the background.
    let lingering_on = || {
        (0..3)
            .filter(|&i| {
                let left: i64 = masters.cmd_on(i, &["PTTL", "report"]);
                left > 0 && left <= LEAST.as_millis() as i64
            })
            .count()
    };
    assert!(lingering_on() >= 2, "not on a majority");
    let settled = Instant::now() + Duration::from_millis(500);
    while lingering_on() < 3 && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lingering_on(), 3, "the last master kept its old lease");
    let mutex = second.mutex_with("report", waiting()).unwrap();
    assert!(matches!(mutex.try_lock().await, Err(Error::Busy { .. })));
    let _granted = mutex.lock().await.unwrap();
    assert!(before.elapsed() >= LEAST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_hold_given_back_early_stays_held_and_its_waiter_is_told() {
    let cluster = RedisCluster::start(3, 0);
    let connect = || Client::cluster_builder(cluster.urls()).connect();
    let (holder, other) = (connect().await.unwrap(), connect().await.unwrap());
    for kind in [Kind::Mutex, Kind::Fair, Kind::Permit] {
        let name = format!("nightly-{kind:?}");
        let after = give_back_while_waited_for(&holder, &other, kind, &name, lingering(), "unlock");
        let after = after.await;
        assert!(after >= LEAST, "{kind:?}: granted {after:?} after");
    }
}

#[test]
fn the_blocking_api_keeps_the_lock_until_the_least_time() {
    let server = RedisServer::start();
    let client = dlock::blocking::Client::connect(&server.url()).unwrap();
    let mutex = client.mutex_with("blocking", lingering()).unwrap();
    let before = Instant::now();
    mutex.lock().unwrap().unlock().unwrap();
    assert!(matches!(mutex.try_lock(), Err(Error::Busy { .. })));
    mutex.lock().unwrap().unlock().unwrap();
    assert!(before.elapsed() >= LEAST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_is_recorded_only_while_held_and_read_back_by_the_next_holder() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex("report").unwrap();
    let hour = Duration::from_secs(3600);
    let guard = mutex.lock().await.unwrap();
    assert_eq!(guard.last_success().await.unwrap(), None);
    guard.record_success(hour).await.unwrap();
    guard.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = mutex.lock().await.unwrap();
    let success = next.last_success().await.unwrap().expect("recorded");
    assert!(success.ago >= Duration::from_millis(150), "{success:?}");
    assert!(success.ago < Duration::from_secs(10), "{success:?}");
    assert!(
        success.stands_for > hour - Duration::from_secs(10),
        "{success:?}"
    );
    let key = next.data_key(dlock::SUCCESS_RECORD);
    assert_eq!(key, "{report}:data:last-success");
    // Something else written there is no success of ours.
    let _: () = server.cmd(&["SET", &key, "not a record", "PX", "60000"]);
    assert_eq!(next.last_success().await.unwrap(), None);
    for bad in [Duration::ZERO, dlock::MAX_SUCCESS_MEMORY * 2] {
        let refused = next.record_success(bad).await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    // A hold that is gone records nothing.
    let _: () = server.cmd(&["DEL", &key]);
    let _: () = server.cmd(&["SET", "report", "someone-else"]);
    assert!(matches!(
        next.record_success(hour).await,
        Err(Error::Lost { .. })
    ));
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_a_hold_given_back_early_stays_held_and_its_waiter_is_told() {
    let group = MasterWithReplicas::start(1);
    let sentinels = SentinelGroup::start(group.master(), "locks", 3);
    let connect = || Client::sentinel_builder(sentinels.urls(), "locks").connect();
    let (holder, other) = (connect().await.unwrap(), connect().await.unwrap());
    for kind in [Kind::Mutex, Kind::Permit] {
        let name = format!("nightly-{kind:?}");
        let after = give_back_while_waited_for(&holder, &other, kind, &name, lingering(), "unlock");
        let after = after.await;
        assert!(after >= LEAST, "{kind:?}: granted {after:?} after");
    }
}

/// The negative control of the waiters' being told: a lease shortened silently (a bare
/// `PEXPIRE`, no message) leaves a plain waiter asleep until the old lease's end and a
/// queued one until its next refresh, both past [`TOLD`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_not_told_of_a_shortened_lease_sleeps_past_it() {
    let server = RedisServer::start();
    let holder = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    let fixed = LockOptions::default().ttl(Duration::from_secs(30));
    for kind in [Kind::Mutex, Kind::Fair] {
        let name = format!("silent-{kind:?}");
        let _held = hold(&holder, kind, &name, fixed).await;
        let (other, waited) = (other.clone(), name.clone());
        let mut waiter =
            tokio::spawn(async move { take(&other, kind, &waited, waiting(), false).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _: i64 = server.cmd(&["PEXPIRE", &name, "500"]);
        let told = tokio::time::timeout(TOLD, &mut waiter).await;
        assert!(
            told.is_err(),
            "{kind:?}: a waiter not told was granted: {told:?}"
        );
        waiter.abort();
    }
}

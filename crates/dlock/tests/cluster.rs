//! Every primitive on a three-master Redis Cluster: names spread over all masters, mutual
//! exclusion under concurrency, notified hand-off over sharded pub/sub, renewal of many
//! locks across slots, and a slot migrated while a lock is held and awaited.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::{key_slot, RedisCluster};

mod common;
use common::{take, Kind};

async fn cluster_client(cluster: &RedisCluster) -> Client {
    Client::cluster_builder(cluster.urls())
        .connect()
        .await
        .unwrap()
}

/// A fixed lease that no test outlives, and a waiter that would poll only at its end:
/// a waiter that gets the lock early was woken by a notification.
fn slow_poll(ttl: Duration) -> LockOptions {
    LockOptions::default()
        .ttl(ttl)
        .wait(Wait::Timeout(Duration::from_secs(60)))
        .backoff(ttl, ttl)
}

/// Names whose lock keys land on every master of `cluster`.
fn names_on_every_master(cluster: &RedisCluster, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("job-{i}")).collect();
    let masters: BTreeSet<usize> = names
        .iter()
        .map(|name| cluster.master_for_slot(key_slot(name)))
        .collect();
    assert_eq!(masters.len(), 3, "the names must cover every master");
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_excludes_and_hands_off_on_names_over_every_master() {
    let cluster = RedisCluster::start(3, 0);
    let first = cluster_client(&cluster).await;
    let second = cluster_client(&cluster).await;
    let names = names_on_every_master(&cluster, 12);
    let options = LockOptions::default().ttl(Duration::from_secs(20));
    for kind in [
        Kind::Mutex,
        Kind::Fair,
        Kind::Reentrant,
        Kind::Write,
        Kind::Permit,
    ] {
        for name in &names {
            let name = format!("{name}-{kind:?}");
            let mut held = vec![take(&first, kind, &name, options, true).await.unwrap()];
            if kind == Kind::Permit {
                // The helper's semaphore has two permits.
                held.push(take(&first, kind, &name, options, true).await.unwrap());
            }
            match take(&second, kind, &name, options, true).await {
                Err(Error::Busy { .. }) => {}
                other => panic!("{kind:?} {name}: a second holder got {other:?}"),
            }
            // Two kinds on one name exclude each other on a cluster too.
            let other_kind = if kind == Kind::Write {
                Kind::Mutex
            } else {
                Kind::Write
            };
            assert!(
                take(&second, other_kind, &name, options, true)
                    .await
                    .is_err(),
                "{kind:?} {name}: {other_kind:?} got in"
            );
            let fence = held[0].fence().await.unwrap();
            assert!(fence > 0);
            // Guarded writes: the data keys are in the lock's slot (a cluster refuses a
            // script across slots), on whichever master holds it.
            let batch = dlock::Guarded::new().incr_by("n", 2).get("n");
            let replies = held[0].apply(&batch).await.unwrap();
            assert_eq!(
                replies,
                [
                    redis::Value::Int(2),
                    redis::Value::BulkString(b"2".to_vec())
                ],
                "{kind:?} {name}"
            );
            for hold in held {
                hold.unlock().await.unwrap();
            }
            let next = take(&second, kind, &name, options, true).await.unwrap();
            assert!(next.fence().await.unwrap() > fence, "{kind:?} {name}");
            next.unlock().await.unwrap();
        }
    }
    // Readers share, and exclude a writer, on a cluster too.
    let lock = first.rwlock_with("report", options).unwrap();
    let (a, b) = (dlock::Owner::new(), dlock::Owner::new());
    let r1 = lock.for_owner(&a).try_read().await.unwrap();
    let r2 = lock.for_owner(&b).try_read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::Busy { .. })));
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    lock.try_write().await.unwrap().unlock().await.unwrap();
    // find_locks visits every master.
    let held: Vec<_> = futures_util::future::join_all(
        names
            .iter()
            .map(|name| async { first.mutex(name).unwrap().try_lock().await.unwrap() }),
    )
    .await;
    let found = first.find_locks("job-*").await.unwrap();
    let found: BTreeSet<String> = found.into_iter().map(|info| info.name).collect();
    assert_eq!(found, names.iter().cloned().collect::<BTreeSet<_>>());
    for guard in held {
        guard.unlock().await.unwrap();
    }
}

/// Read-modify-write of a counter in the lock's slot, with a pause between read and
/// write so that two holders at once would lose an update.
async fn unsafe_increment(conn: &mut redis::cluster_async::ClusterConnection, key: &str) {
    let value: Option<i64> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    tokio::time::sleep(Duration::from_micros(300)).await;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value.unwrap_or(0) + 1)
        .query_async(conn)
        .await
        .unwrap();
}

async fn hammer(cluster: &RedisCluster, kind: Kind, locked: bool) -> i64 {
    const TASKS: usize = 12;
    const ROUNDS: usize = 8;
    let name = format!("counted-{kind:?}-{locked}");
    let counter = format!("{{{name}}}:counter");
    let clients = [cluster_client(cluster).await, cluster_client(cluster).await];
    let raw = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let client = clients[task % 2].clone();
        let mut conn = raw.get_async_connection().await.unwrap();
        let (name, counter) = (name.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let options = LockOptions::default().ttl(Duration::from_secs(10));
            // A semaphore of one permit: the helper's has two.
            let semaphore = client.semaphore_with(&name, 1, options).unwrap();
            for _ in 0..ROUNDS {
                if !locked {
                    unsafe_increment(&mut conn, &counter).await;
                    continue;
                }
                if kind == Kind::Permit {
                    let permit = semaphore.lock().await.unwrap();
                    unsafe_increment(&mut conn, &counter).await;
                    permit.unlock().await.unwrap();
                } else {
                    let held = take(&client, kind, &name, options, false).await.unwrap();
                    unsafe_increment(&mut conn, &counter).await;
                    held.unlock().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = raw.get_async_connection().await.unwrap();
    let total: Option<i64> = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut conn)
        .await
        .unwrap();
    total.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_never_lose_an_update_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    for kind in [
        Kind::Mutex,
        Kind::Fair,
        Kind::Reentrant,
        Kind::Write,
        Kind::Permit,
    ] {
        assert_eq!(hammer(&cluster, kind, true).await, 12 * 8, "{kind:?}");
    }
    // Negative control: the same tasks without the lock lose updates.
    assert!(hammer(&cluster, Kind::Mutex, false).await < 12 * 8);
}

/// Holds `name` with `holder`, starts a waiter on another client that would poll only
/// at the end of the 30 s lease, releases after 300 ms, and returns how long the waiter
/// waited after the release.
async fn handoff_wait(first: &Client, second: &Client, kind: Kind, name: &str) -> Duration {
    let options = slow_poll(Duration::from_secs(30));
    let mut held = vec![take(first, kind, name, options, false).await.unwrap()];
    if kind == Kind::Permit {
        held.push(take(first, kind, name, options, false).await.unwrap());
    }
    let (second, name2) = (second.clone(), name.to_string());
    let waiter = tokio::spawn(async move {
        let hold = take(&second, kind, &name2, options, false).await.unwrap();
        let got = Instant::now();
        hold.unlock().await.unwrap();
        got
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    for hold in held {
        hold.unlock().await.unwrap();
    }
    waiter.await.unwrap().saturating_duration_since(released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_over_sharded_pubsub() {
    let cluster = RedisCluster::start(3, 0);
    let first = cluster_client(&cluster).await;
    let second = cluster_client(&cluster).await;
    let names = names_on_every_master(&cluster, 12);
    for kind in [Kind::Mutex, Kind::Fair, Kind::Write, Kind::Permit] {
        for name in names.iter().take(3) {
            let name = format!("{name}-{kind:?}");
            let waited = handoff_wait(&first, &second, kind, &name).await;
            // Without a notification the waiter would sleep the rest of the 30 s lease.
            assert!(
                waited < Duration::from_secs(10),
                "{kind:?} {name}: the waiter took {waited:?} after the release"
            );
        }
    }
    // The notifications went over sharded pub/sub, on the shard of each lock.
    let sharded: u64 = cluster
        .masters()
        .iter()
        .map(|master| master.command_calls().get("spublish").copied().unwrap_or(0))
        .sum();
    assert!(sharded > 0, "no SPUBLISH reached any master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_locks_across_slots_stay_renewed() {
    let cluster = RedisCluster::start(3, 0);
    let client = cluster_client(&cluster).await;
    let names = names_on_every_master(&cluster, 60);
    let slots: BTreeSet<u16> = names.iter().map(key_slot).collect();
    assert!(slots.len() > 50, "the names must spread over many slots");
    let options = LockOptions::default().renewed(Duration::from_millis(1200));
    let mut guards = Vec::new();
    for name in &names {
        guards.push(
            client
                .mutex_with(name, options)
                .unwrap()
                .lock()
                .await
                .unwrap(),
        );
    }
    // Three leases long: only renewal keeps them.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    let other = cluster_client(&cluster).await;
    for (guard, name) in guards.iter().zip(&names) {
        assert!(guard.lost_signal().lost().is_none(), "{name} was lost");
        assert!(guard.is_held().await.unwrap(), "{name} is not held");
        assert!(
            matches!(
                other.mutex(name).unwrap().try_lock().await,
                Err(Error::Busy { .. })
            ),
            "{name} was free"
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_while_held_keeps_the_lock_and_its_waiter() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let holder = cluster_client(&cluster).await;
    let waiting = cluster_client(&cluster).await;
    let name = "migrating";
    let slot = key_slot(name);
    let from = cluster.master_for_slot(slot);
    let to = (from + 1) % 3;
    // A fixed lease far longer than the test: the waiter can only get in early through a
    // notification. Beside it, in the same slot, a lock renewed every 500 ms.
    let fixed = LockOptions::default().ttl(Duration::from_secs(30));
    let guard = holder
        .mutex_with(name, fixed)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let fence = guard.fence().await.unwrap();
    let renewed_name = "{migrating}-renewed";
    assert_eq!(key_slot(renewed_name), slot);
    let renewed = LockOptions::default().renewed(Duration::from_millis(1500));
    let renewed_guard = holder
        .mutex_with(renewed_name, renewed)
        .unwrap()
        .lock()
        .await
        .unwrap();
    // A waiter subscribed on the old shard, polling only every 30 s.
    let waiter = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let options = slow_poll(Duration::from_secs(30));
            let guard = waiting
                .mutex_with(name, options)
                .unwrap()
                .lock()
                .await
                .unwrap();
            let got = Instant::now();
            let fence = guard.fence().await.unwrap();
            guard.unlock().await.unwrap();
            (got, fence)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let migrator = cluster.clone();
    tokio::task::spawn_blocking(move || migrator.migrate_slot(slot, to))
        .await
        .unwrap();
    assert_eq!(cluster.master_for_slot(slot), to);
    // Past two leases of the renewed lock on the new master: renewals followed the slot.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        renewed_guard.lost_signal().lost().is_none(),
        "the renewed lock was lost across the migration"
    );
    assert!(renewed_guard.is_held().await.unwrap());
    renewed_guard.unlock().await.unwrap();
    assert!(
        guard.lost_signal().lost().is_none(),
        "lost across the migration"
    );
    assert!(guard.is_held().await.unwrap());
    assert!(matches!(
        holder.mutex("migrating").unwrap().try_lock().await,
        Err(Error::Busy { .. })
    ));
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let (got, next_fence) = tokio::time::timeout(Duration::from_secs(40), waiter)
        .await
        .expect("the waiter never got the lock")
        .unwrap();
    assert!(
        next_fence > fence,
        "the fence went back across the migration"
    );
    let waited = got.saturating_duration_since(released);
    assert!(
        waited < Duration::from_secs(10),
        "the waiter was not woken after the migration (took {waited:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_kind_of_deployment_is_named_at_connect() {
    let cluster = RedisCluster::start(3, 0);
    let plain = dlock_testkit::RedisServer::start();
    let sentinels = dlock_testkit::SentinelGroup::start(&plain, "plain", 1);
    let message = |outcome: dlock::Result<Client>| match outcome {
        Err(error @ Error::Misconfigured(_)) => {
            assert!(
                !error.is_transient(),
                "retrying a misconfiguration cannot help"
            );
            error.to_string()
        }
        other => panic!("expected a misconfiguration error, got {other:?}"),
    };
    // A single-server client on a cluster node would meet MOVED for half its locks.
    let said = message(Client::connect(&cluster.urls()[0]).await);
    assert!(said.contains("Cluster node"), "{said}");
    // ... and on a sentinel, unknown commands.
    let said = message(Client::connect(&sentinels.urls()[0]).await);
    assert!(said.contains("Sentinel"), "{said}");
    // A cluster client on a plain server, or on a sentinel.
    let said = message(Client::cluster_builder([plain.url()]).connect().await);
    assert!(said.contains("without cluster support"), "{said}");
    let said = message(Client::cluster_builder(sentinels.urls()).connect().await);
    assert!(said.contains("does not know CLUSTER"), "{said}");
    // A Sentinel client on a plain server, or for a service the sentinels do not know.
    let said = message(
        Client::sentinel_builder([plain.url()], "plain")
            .connect()
            .await,
    );
    assert!(said.contains("sentinel"), "{said}");
    let said = message(
        Client::sentinel_builder(sentinels.urls(), "other")
            .connect()
            .await,
    );
    assert!(said.contains("\"other\""), "{said}");
    // The right ones connect.
    Client::sentinel_builder(sentinels.urls(), "plain")
        .connect()
        .await
        .unwrap();
    Client::cluster_builder(cluster.urls())
        .connect()
        .await
        .unwrap();
}

/// Look-alike names on a cluster (issue 32): `acct` and `{acct}` hash to one slot, and
/// their companions (queues, expiry index, guarded data and records) stay in it without
/// meeting: both are held at once by every kind, and each holder's guarded data is its
/// own. A companion outside the slot would fail the scripts with CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn look_alike_names_are_separate_locks_in_one_slot() {
    let cluster = RedisCluster::start(3, 0);
    let client = cluster_client(&cluster).await;
    let options = LockOptions::default().ttl(Duration::from_secs(20));
    for kind in common::KINDS {
        let (plain, tagged) = (format!("acct-{kind:?}"), format!("{{acct-{kind:?}}}"));
        assert_eq!(
            key_slot(&plain),
            key_slot(&tagged),
            "one slot, or the test is moot"
        );
        let mut holds = Vec::new();
        for name in [&plain, &tagged] {
            // Both permits of the helper's semaphore: a shared index would refuse the
            // second lock's first permit.
            let count = if kind == Kind::Permit { 2 } else { 1 };
            for _ in 0..count {
                let held = take(&client, kind, name, options, true)
                    .await
                    .unwrap_or_else(|err| panic!("{kind:?} {name}: {err}"));
                held.apply(&dlock::Guarded::new().set("balance", name.as_str()))
                    .await
                    .unwrap();
                holds.push((name.clone(), held));
            }
        }
        for (name, held) in &holds {
            let read = held
                .apply(&dlock::Guarded::new().get("balance"))
                .await
                .unwrap();
            assert_eq!(
                read,
                vec![redis::Value::BulkString(name.clone().into_bytes())],
                "{kind:?}: {name}'s guarded data was another lock's"
            );
        }
        for (_, held) in holds {
            held.unlock().await.unwrap();
        }
    }
}

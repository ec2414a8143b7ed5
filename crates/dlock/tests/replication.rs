//! Beyond one node with replicas: a Sentinel failover that lock operations and waiters
//! follow, and opt-in replica acknowledgement (`LockOptions::replicas`).

use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::{key_slot, MasterWithReplicas, RedisCluster, RedisServer, SentinelGroup};

/// Waits until `replicas` replicas acknowledge a write of `probe` (a key `master` serves).
fn until_acknowledged(master: &RedisServer, replicas: usize, probe: &str) {
    let mut conn = master.connection();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let _: () = redis::cmd("SET")
            .arg(probe)
            .arg(1)
            .query(&mut conn)
            .unwrap();
        let acknowledged: usize = redis::cmd("WAIT")
            .arg(replicas)
            .arg(1000)
            .query(&mut conn)
            .unwrap();
        if acknowledged >= replicas {
            let _: () = redis::cmd("DEL").arg(probe).query(&mut conn).unwrap();
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas never acknowledged a write"
        );
    }
}

fn fixed(ttl: Duration) -> LockOptions {
    LockOptions::default()
        .ttl(ttl)
        .wait(Wait::Timeout(Duration::from_secs(60)))
}

/// Retries `attempt` until it succeeds or `within` passes (a failover under way).
async fn eventually<T, F, Fut>(within: Duration, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = dlock::Result<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(err) if Instant::now() < deadline => {
                eprintln!("not yet: {err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("still failing after {within:?}: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sentinel_failover_locks_and_wakeups_continue_on_the_new_master() {
    let mut group = MasterWithReplicas::start(1);
    let sentinels = SentinelGroup::start(group.master(), "locks", 3);
    let connect = || Client::sentinel_builder(sentinels.urls(), "locks").connect();
    let first = connect().await.unwrap();
    let second = connect().await.unwrap();
    let options = fixed(Duration::from_secs(20));
    first
        .mutex_with("before", options)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    // A waiter before the failover starts the second client's subscriber, which must
    // then follow the failover.
    let held = first
        .mutex_with("warm-up", options)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let warm_up = {
        let second = second.clone();
        tokio::spawn(async move {
            let waiting = second.mutex_with("warm-up", options).unwrap();
            waiting.lock().await.unwrap().unlock().await.unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.unlock().await.unwrap();
    warm_up.await.unwrap();

    let old_port = group.master().port();
    group.master_mut().kill9();
    let new_port = sentinels.wait_for_failover(old_port, Duration::from_secs(30));
    assert_ne!(new_port, old_port);

    // Lock operations continue against the new master.
    let mutex = first.mutex_with("after", options).unwrap();
    let guard = eventually(Duration::from_secs(20), || mutex.try_lock()).await;
    let promoted = group
        .by_port(new_port)
        .expect("the promoted replica is ours");
    let holder: Option<String> = promoted.cmd(&["GET", "after"]);
    assert_eq!(
        holder.as_deref(),
        Some(guard.token()),
        "the grant is on the new master"
    );
    // Guarded writes and elections go to the master the sentinels name, too.
    let replies = guard
        .apply(&dlock::Guarded::new().incr_by("n", 1))
        .await
        .unwrap();
    assert_eq!(replies, [redis::Value::Int(1)]);
    let n: i64 = promoted.cmd(&["GET", "{after}:data:n"]);
    assert_eq!(n, 1);
    let election = first.election_with("leading", options).unwrap();
    let leading = election.campaign("me").await.unwrap();
    // The second client learns of the failover at its first request, as for any drop.
    let looking = second.election("leading").unwrap();
    let leader = eventually(Duration::from_secs(20), || looking.leader()).await;
    assert_eq!(leader.map(|l| l.term), Some(leading.term()));
    leading.resign().await.unwrap();

    // A waiter on the other client is woken by the release on the new master, though it
    // would otherwise poll only at the end of the 20 s lease.
    let waiting = second
        .mutex_with(
            "after",
            options.backoff(Duration::from_secs(20), Duration::from_secs(20)),
        )
        .unwrap();
    let waiter = tokio::spawn(async move {
        let guard = eventually(Duration::from_secs(20), || waiting.lock()).await;
        let got = Instant::now();
        guard.unlock().await.unwrap();
        got
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = waiter.await.unwrap();
    let waited = got.saturating_duration_since(released);
    assert!(
        waited < Duration::from_secs(8),
        "the waiter was not woken by the release on the new master (took {waited:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledgement_grants_only_what_the_replicas_have() {
    let group = MasterWithReplicas::start(1);
    let client = Client::connect(&group.master().url()).await.unwrap();
    let acked = fixed(Duration::from_secs(10)).replicas(1, Duration::from_secs(1));

    // Replica running: granted, and the replica has the grant.
    let guard = client
        .mutex_with("acked", acked)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let on_replica: Option<String> = group.replica(0).cmd(&["GET", "acked"]);
    assert_eq!(on_replica.as_deref(), Some(guard.token()));
    // The fence was drawn with the grant (read from the replica before `fence()` could
    // draw it), so the acknowledgement covered it too.
    let fence_on_replica: Option<u64> = group.replica(0).cmd(&["GET", "{acked}:fence"]);
    assert_eq!(fence_on_replica, Some(guard.fence().await.unwrap()));
    guard.unlock().await.unwrap();

    // Every kind asks for the acknowledgement the same way.
    let owner = dlock::Owner::new();
    let rw = client.rwlock_with("acked-rw", acked).unwrap();
    rw.for_owner(&owner)
        .try_read()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let semaphore = client.semaphore_with("acked-sem", 2, acked).unwrap();
    semaphore.try_lock().await.unwrap().unlock().await.unwrap();

    // Another kind on the name is named as such under acknowledgement too (the script's
    // error arrives inside the WAIT pipeline): WrongType, not a refusal.
    let _: () = group.master().cmd(&["SET", "acked-typed", "a-string"]);
    let typed = client.semaphore_with("acked-typed", 2, acked).unwrap();
    match typed.try_lock().await {
        Err(Error::WrongType { key, .. }) => assert_eq!(key, "acked-typed"),
        other => panic!("expected WrongType, got {other:?}"),
    }

    // Replica stopped: the acquire fails with the typed error and leaves no key.
    group.replica(0).pause();
    for fair in [false, true] {
        let mutex = if fair {
            client.fair_mutex_with("acked", acked).unwrap()
        } else {
            client.mutex_with("acked", acked).unwrap()
        };
        match mutex.try_lock().await {
            Err(Error::NotReplicated {
                wanted,
                acknowledged,
                ..
            }) => assert_eq!((wanted, acknowledged), (1, 0)),
            other => panic!("fair {fair}: expected NotReplicated, got {other:?}"),
        }
        let exists: i64 = group.master().cmd(&["EXISTS", "acked"]);
        assert_eq!(
            exists, 0,
            "fair {fair}: an unreplicated grant was left behind"
        );
    }
    // The client's other requests do not wait behind the WAIT.
    let plain = client.mutex("unacked").unwrap();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            let slow = fixed(Duration::from_secs(10)).replicas(1, Duration::from_secs(2));
            client
                .mutex_with("acked-slow", slow)
                .unwrap()
                .try_lock()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    plain.try_lock().await.unwrap().unlock().await.unwrap();
    assert!(
        !waiting.is_finished(),
        "the plain request should have finished while the WAIT was still waiting"
    );
    assert!(matches!(
        waiting.await.unwrap(),
        Err(Error::NotReplicated { .. })
    ));

    // A WAIT the response timeout would cut off is refused up front.
    match client.mutex_with(
        "acked",
        fixed(Duration::from_secs(10)).replicas(1, Duration::from_secs(5)),
    ) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("response timeout"), "{why}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }

    // An extend the replica cannot acknowledge gives the hold back.
    group.replica(0).resume();
    group.wait_for_replicas();
    let mut guard = client
        .mutex_with("acked", acked)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    group.replica(0).pause();
    assert!(matches!(
        guard.extend(Duration::from_secs(10)).await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(
        guard.lost_signal().lost().is_some(),
        "the lost signal fired"
    );
    let exists: i64 = group.master().cmd(&["EXISTS", "acked"]);
    assert_eq!(exists, 0, "the unreplicated extend left the lock held");
    group.replica(0).resume();

    // A downgrade is a grant too: unacknowledged, its read hold is given back.
    group.wait_for_replicas();
    let write = rw.try_write().await.unwrap();
    group.replica(0).pause();
    match write.downgrade().await {
        Err(Error::NotReplicated { .. }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let exists: i64 = group.master().cmd(&["EXISTS", "acked-rw"]);
    assert_eq!(exists, 0, "the unreplicated downgrade left a hold behind");
    group.replica(0).resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledgement_on_a_cluster_waits_on_the_locks_own_shard() {
    let cluster = RedisCluster::start(3, 1);
    for (index, master) in cluster.masters().iter().enumerate() {
        let probe = (0..)
            .map(|i| format!("probe-{i}"))
            .find(|key| cluster.master_for_slot(key_slot(key)) == index)
            .unwrap();
        until_acknowledged(master, 1, &probe);
    }
    let client = Client::cluster_builder(cluster.urls())
        .connect()
        .await
        .unwrap();
    let acked = LockOptions::default()
        .renewed(Duration::from_millis(1500))
        .replicas(1, Duration::from_secs(1));
    let mut guards = Vec::new();
    for name in ["a", "b", "c", "d", "e", "f"] {
        guards.push(
            client
                .mutex_with(name, acked)
                .unwrap()
                .try_lock()
                .await
                .unwrap(),
        );
    }
    // Renewals are acknowledged too: the locks outlive their lease.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for guard in guards {
        assert!(guard.lost_signal().lost().is_none());
        guard.unlock().await.unwrap();
    }

    // One shard's replica frozen: only the locks on that shard go unacknowledged, so the
    // WAIT ran on the shard that took the write.
    let frozen_master = 0;
    let master_port = cluster.masters()[frozen_master].port().to_string();
    let replica = cluster
        .replicas()
        .iter()
        .find(|replica| {
            let info: String = replica.cmd(&["INFO", "replication"]);
            info.lines()
                .any(|line| line.trim() == format!("master_port:{master_port}"))
        })
        .expect("master 0 has a replica");
    replica.pause();
    let mut refused = 0;
    for i in 0..12 {
        let name = format!("shard-{i}");
        let on_frozen = cluster.master_for_slot(key_slot(&name)) == frozen_master;
        match client.mutex_with(&name, acked).unwrap().try_lock().await {
            Ok(guard) => {
                assert!(!on_frozen, "{name} was granted on the frozen shard");
                guard.unlock().await.unwrap();
            }
            Err(Error::NotReplicated { .. }) => {
                assert!(on_frozen, "{name} was refused on a healthy shard");
                refused += 1;
            }
            Err(err) => panic!("{name}: {err}"),
        }
    }
    replica.resume();
    assert!(refused > 0, "no name landed on the frozen shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_neither_leak_on_cancel_nor_hold_up_each_other_or_renewals() {
    let group = MasterWithReplicas::start(1);
    let client = Client::connect(&group.master().url()).await.unwrap();
    let acked = fixed(Duration::from_secs(20)).replicas(1, Duration::from_secs(2));
    // A plain lock renewed every 500 ms, and an acknowledged one renewed too.
    let plain = client
        .mutex_with(
            "plain",
            LockOptions::default().renewed(Duration::from_millis(1500)),
        )
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let renewed_acked = client
        .mutex_with(
            "renewed-acked",
            LockOptions::default()
                .renewed(Duration::from_millis(1500))
                .replicas(1, Duration::from_secs(1)),
        )
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    group.replica(0).pause();

    // Four acknowledged acquires at once each get their own answer (NotReplicated), none
    // a response timeout from queueing behind the others' WAIT.
    let attempts = (0..4).map(|i| {
        let client = client.clone();
        async move {
            client
                .mutex_with(&format!("acked-{i}"), acked)
                .unwrap()
                .try_lock()
                .await
        }
    });
    for outcome in futures_util::future::join_all(attempts).await {
        assert!(
            matches!(outcome, Err(Error::NotReplicated { .. })),
            "{outcome:?}"
        );
    }
    for i in 0..4 {
        let exists: i64 = group.master().cmd(&["EXISTS", &format!("acked-{i}")]);
        assert_eq!(exists, 0, "acked-{i} was left behind");
    }

    // An acquire dropped while its WAIT runs gives its grant back.
    let mutex = client.mutex_with("cancelled", acked).unwrap();
    let dropped = tokio::time::timeout(Duration::from_millis(300), mutex.lock()).await;
    assert!(dropped.is_err(), "the WAIT should still have been running");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let exists: i64 = group.master().cmd(&["EXISTS", "cancelled"]);
        if exists == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cancelled acquire's grant was never given back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Meanwhile the acknowledged lock's renewals stalled on the WAIT, but the plain lock
    // (on the client's other scheduler) was renewed all along: it outlived its lease.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        plain.lost_signal().lost().is_none(),
        "a plain lease was lost"
    );
    assert!(plain.is_held().await.unwrap());
    // The acknowledged lock could not be renewed: its lost signal fired.
    assert!(renewed_acked.lost_signal().lost().is_some());
    group.replica(0).resume();
    plain.unlock().await.unwrap();
}

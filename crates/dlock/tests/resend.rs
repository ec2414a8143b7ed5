//! Every script of the library is safe to run twice: the redis crate's connection, and
//! dlock's own `resent_once`, send a request again when its connection dropped before the
//! reply came, so a script may run twice for one call.
//!
//! This test binary turns on the library's resend check: every script call is sent once
//! more right after the first, and the keys it names are compared before and after the
//! second run (only restarted leases may move). It then drives every kind of lock, on one
//! server and on Redlock's masters, through every operation that runs a script, and
//! checks that every script named in the library's source was checked, and that no
//! second run changed anything. The negative control, a script that counts each run,
//! must be caught.

use std::collections::BTreeSet;
use std::time::Duration;

use dlock::{Client, Error, LockOptions, Owner, Wait};
use dlock_testkit::{IndependentMasters, RedisServer};

/// The names of every script the library sends: its catalogue, which its own tests hold to
/// every `lua_script!`/`rw_script!` in the sources (catalog.rs).
fn scripts_in_source() -> BTreeSet<String> {
    dlock::__library_scripts()
        .into_iter()
        .map(|script| script.name.to_string())
        .collect()
}

fn manual(ttl_ms: u64) -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(Wait::NoWait)
}

/// Every kind on one server, through each operation that runs a script.
async fn single_node(client: &Client, server: &RedisServer) {
    let long = manual(20_000);

    // Plain mutex: the fast path, the slow path (busy, our own grant), the lazy fence
    // (and its record), is_held, extend, unlock; the fence drawn at grant.
    let mutex = client.mutex_with("m", long).unwrap();
    let mut guard = mutex.try_lock().await.unwrap();
    assert!(matches!(mutex.try_lock().await, Err(Error::Busy { .. })));
    let fence = guard.fence().await.unwrap();
    assert!(fence > 1, "fences have the clock floor: {fence}");
    assert!(guard.is_held().await.unwrap());
    guard.extend(Duration::from_secs(30)).await.unwrap();
    guard.unlock().await.unwrap();
    let eager = client.mutex_with("m", long.fence_at_grant()).unwrap();
    let guard = eager.try_lock().await.unwrap();
    assert!(guard.drawn_fence().unwrap() > fence);
    // A release by token from outside, as `dlock release` does.
    let token = guard.into_token();
    eager.release_token(&token).await.unwrap();

    // Fair mutex, with a waiter that gives up (it leaves the queue).
    let fair = client.fair_mutex_with("f", long).unwrap();
    let held = fair.try_lock().await.unwrap();
    let impatient = client
        .fair_mutex_with("f", long.wait(Wait::Timeout(Duration::from_millis(300))))
        .unwrap();
    assert!(matches!(
        impatient.lock().await,
        Err(Error::TimedOut { .. })
    ));
    held.unlock().await.unwrap();

    // Reentrant mutex: enter twice, give one back by owner, the other by its guard.
    let reentrant = client.reentrant_mutex_with("r", long).unwrap();
    let owner = Owner::new();
    let outer = reentrant.for_owner(&owner).lock().await.unwrap();
    let inner = reentrant.for_owner(&owner).lock().await.unwrap();
    assert_eq!(inner.holds_at_grant(), 2);
    assert_eq!(reentrant.for_owner(&owner).release_one().await.unwrap(), 1);
    assert_eq!(reentrant.for_owner(&owner).hold_count().await.unwrap(), 1);
    // Whichever hold release_one gave back, the other guard's unlock gives back the last.
    let (first, second) = (outer.unlock().await, inner.unlock().await);
    assert!(first.is_ok() != second.is_ok(), "{first:?} {second:?}");
    assert_eq!(reentrant.for_owner(&owner).hold_count().await.unwrap(), 0);

    // Kept at least a while (hold_at_least): a mutex's hold lingers; a reentrant owner's
    // inner hold is given back at once, its last one lingers.
    let least = long.hold_at_least(Duration::from_secs(60));
    let lingering = client.mutex_with("l", least).unwrap();
    lingering.try_lock().await.unwrap().unlock().await.unwrap();
    let nested = client.reentrant_mutex_with("lr", least).unwrap();
    let owner = Owner::new();
    let outer = nested.for_owner(&owner).lock().await.unwrap();
    let inner = nested.for_owner(&owner).lock().await.unwrap();
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let permits = client.semaphore_with("ls", 2, least).unwrap();
    permits.try_lock().await.unwrap().unlock().await.unwrap();

    // Several names at once: granted, busy (one name taken), released.
    let both = client.multi_lock_with(&["ma", "mb"], long).unwrap();
    let held = both.try_lock().await.unwrap();
    let overlapping = client.multi_lock_with(&["mb", "mc"], long).unwrap();
    assert!(matches!(
        overlapping.try_lock().await,
        Err(Error::Busy { .. })
    ));
    held.unlock().await.unwrap();
    overlapping
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    // Read-write lock: write, downgrade, read, the readers count, releases.
    let rwlock = client.rwlock_with("rw", long).unwrap();
    let writer = rwlock.try_write().await.unwrap();
    let reader = writer.downgrade().await.unwrap();
    let other = rwlock.for_owner(&Owner::new()).try_read().await.unwrap();
    assert_eq!(rwlock.readers().await.unwrap(), 2);
    reader.unlock().await.unwrap();
    other.unlock().await.unwrap();
    let writer = rwlock.try_write().await.unwrap();
    writer.unlock().await.unwrap();

    // Semaphore: permits, the holders count, a release by token.
    let semaphore = client.semaphore_with("s", 2, long).unwrap();
    let one = semaphore.try_lock().await.unwrap();
    let two = semaphore.try_lock().await.unwrap();
    assert_eq!(semaphore.held().await.unwrap(), 2);
    one.unlock().await.unwrap();
    semaphore.release_token(&two.into_token()).await.unwrap();

    // Guarded writes: a batch sent twice is applied once (the second run answers from
    // the holder's record), on a string hold and on a leased entry.
    let guard = mutex.try_lock().await.unwrap();
    let batch = dlock::Guarded::new().incr_by("n", 5).rpush("log", "x");
    let replies = guard.apply(&batch).await.unwrap();
    assert_eq!(replies, [redis::Value::Int(5), redis::Value::Int(1)]);
    let count: i64 = server.cmd(&["GET", &guard.data_key("n")]);
    assert_eq!(count, 5, "a resent batch was applied twice");
    guard.unlock().await.unwrap();
    let permit = client
        .semaphore_with("s", 2, long)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    permit
        .apply(&dlock::Guarded::new().incr_by("n", 1))
        .await
        .unwrap();
    permit.unlock().await.unwrap();

    // Leader election: campaign (proclaim), look, proclaim again, resign.
    let election = client.election_with("leaders", long).unwrap();
    let mut leading = election.campaign("a").await.unwrap();
    leading.proclaim("b").await.unwrap();
    assert_eq!(election.leader().await.unwrap().unwrap().value, "b");
    leading.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);

    // Renewal by the client's renewer.
    let renewed = client
        .mutex_with("renewed", manual(300).renewed(Duration::from_millis(300)))
        .unwrap();
    let guard = renewed.try_lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(guard.is_held().await.unwrap());
    guard.unlock().await.unwrap();

    // Looking from outside; another kind on a name; an operator's forced release.
    let held = client.semaphore_with("s", 2, long).unwrap();
    let permit = held.try_lock().await.unwrap();
    let info = client.inspect("s").await.unwrap();
    assert_eq!(info.holders.len(), 1);
    let clash = client.mutex_with("s", long).unwrap();
    assert!(matches!(
        clash.try_lock().await,
        Err(Error::WrongType { .. })
    ));
    let forced = client.force_release("s").await.unwrap();
    assert!(forced.is_some());
    assert!(matches!(permit.unlock().await, Err(Error::Lost { .. })));
    let _ = server;
}

/// Redlock over three masters, with counters out of step and ahead of the clocks, so that
/// whichever two nodes make the quorum, the largest fence is a counter's and the raise
/// round runs.
async fn redlock(masters: &IndependentMasters) {
    let redlock = Client::redlock(masters.urls()).await.unwrap();
    const AHEAD: u64 = 5_000_000_000_000_000;
    for node in 0..3 {
        let counter = (AHEAD - 10 * node as u64).to_string();
        let _: () = masters.cmd_on(node, &["SET", "{red}:fence", &counter]);
    }
    let mutex = redlock.mutex_with("red", manual(20_000)).unwrap();
    let guard = mutex.try_lock().await.unwrap();
    let fence = guard.fence().await.unwrap();
    assert!(fence > AHEAD - 20, "{fence}");
    // Raised where needed for a majority to hold it (a node answering late may not be).
    let raised = (0..3)
        .filter(|&node| {
            masters.cmd_on::<String>(node, &["GET", "{red}:fence"]) == fence.to_string()
        })
        .count();
    assert!(raised >= 2, "{raised} nodes hold the fence");
    guard.unlock().await.unwrap();
    redlock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_changes_nothing_when_run_again() {
    dlock::__resend_check::enable();
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    single_node(&client, &server).await;
    let masters = IndependentMasters::start(3);
    redlock(&masters).await;

    let report = dlock::__resend_check::report();
    assert!(
        report.violations.is_empty(),
        "scripts that changed state when run again:\n{}",
        report.violations.join("\n")
    );
    let missing: Vec<_> = scripts_in_source()
        .difference(&report.checked)
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "scripts this test never ran: {missing:?} (checked: {:?})",
        report.checked
    );

    // The negative control: a script that counts each run is caught.
    let _ = dlock::__resend_check::probe(
        &client,
        "return redis.call('INCR', KEYS[1])",
        &["probe-counter"],
        &[],
    )
    .await
    .unwrap();
    let report = dlock::__resend_check::report();
    assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    assert!(
        report.violations[0].contains("probe"),
        "{:?}",
        report.violations
    );
    client.shutdown().await;
}

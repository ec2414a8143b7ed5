//! Leader election: one leader at a time with a growing term, its value readable without
//! campaigning, changes observed by notification, a dead leader replaced within its
//! lease, a paused one outranked by its successor.

use std::time::Duration;

use dlock::{Client, Error, Leader, LockOptions, LostReason, Wait};
use dlock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_each_new_term_is_larger() {
    let server = RedisServer::start();
    let a = Client::connect(&server.url()).await.unwrap();
    let b = Client::connect(&server.url()).await.unwrap();
    let election = a.election("scheduler").unwrap();
    assert_eq!(election.leader().await.unwrap(), None);

    let first = election.campaign("host-a").await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        leader,
        Leader {
            value: "host-a".into(),
            term: first.term()
        }
    );

    // A second campaigner waits while the first leads.
    let other = b.election("scheduler").unwrap();
    let waiting = tokio::spawn(async move { other.campaign("host-b").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a second leader while the first leads"
    );
    assert_eq!(
        b.election("scheduler").unwrap().leader().await.unwrap(),
        Some(leader)
    );

    let term = first.term();
    first.resign().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting campaigner leads once the first resigns")
        .unwrap()
        .unwrap();
    assert!(second.term() > term, "{} after {term}", second.term());
    assert_eq!(
        election.leader().await.unwrap().map(|l| l.value),
        Some("host-b".to_string())
    );
    second.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

/// Observers get the current leader, then each change: a new value, a new leader, nobody.
/// Between changes an observer sends nothing (it waits for a message, or for the leader's
/// lease to end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_every_change_without_polling() {
    let server = RedisServer::start();
    let leaders = Client::connect(&server.url()).await.unwrap();
    let watcher = Client::connect(&server.url()).await.unwrap();
    let election = leaders.election("primary").unwrap();
    let mut observer = watcher.election("primary").unwrap().observe();
    assert_eq!(observer.next().await.unwrap(), None);

    let mut leading = election.campaign("10.0.0.1").await.unwrap();
    let seen = observer.next().await.unwrap().unwrap();
    assert_eq!(
        (seen.value.as_str(), seen.term),
        ("10.0.0.1", leading.term())
    );

    // Quiet while nothing changes.
    let next = tokio::spawn(async move {
        let seen = observer.next().await;
        (observer, seen)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.total_calls();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = server.total_calls() - before;
    assert!(
        during <= 1,
        "{during} commands while nothing changed: polling"
    );
    assert!(!next.is_finished());

    leading.proclaim("10.0.0.2").await.unwrap();
    let (mut observer, seen) = next.await.unwrap();
    assert_eq!(seen.unwrap().unwrap().value, "10.0.0.2");

    let term = leading.term();
    leading.resign().await.unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    let again = election.campaign("10.0.0.3").await.unwrap();
    let seen = observer.next().await.unwrap().unwrap();
    assert!(seen.term > term && seen.value == "10.0.0.3");
    drop(again); // resigns in the background
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), observer.next())
            .await
            .expect("a dropped leadership resigns")
            .unwrap(),
        None
    );
}

/// A leader that dies (its lease is not renewed and it says nothing) is replaced within
/// its lease, and observers learn of it when the lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_replaced_within_its_lease() {
    let server = RedisServer::start();
    let dying = Client::connect(&server.url()).await.unwrap();
    let next = Client::connect(&server.url()).await.unwrap();
    let lease = Duration::from_millis(500);
    let short = LockOptions::default().ttl(lease).wait(Wait::Forever);
    let dead = dying
        .election_with("jobs", short)
        .unwrap()
        .campaign("dies")
        .await
        .unwrap();
    let term = dead.term();
    std::mem::forget(dead); // a crash: no resign, no release, no renewal (a fixed lease)

    let mut observer = next.election("jobs").unwrap().observe();
    assert_eq!(observer.next().await.unwrap().unwrap().value, "dies");
    // Nobody said anything: the observer learns it at the lease's end (a successor's
    // word would wake it too, so none campaigns yet). Generous for a loaded machine.
    let nobody = tokio::time::timeout(Duration::from_secs(5), observer.next())
        .await
        .expect("the observer looks again when the dead leader's lease ends");
    assert_eq!(nobody.unwrap(), None);
    let started = std::time::Instant::now();
    let successor = next
        .election_with("jobs", LockOptions::default().wait(Wait::Forever))
        .unwrap()
        .campaign("takes over")
        .await
        .unwrap();
    assert!(successor.term() > term);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let seen = observer.next().await.unwrap();
    assert_eq!(seen.map(|l| l.value), Some("takes over".to_string()));
    successor.resign().await.unwrap();
}

/// A leader paused past its lease is outranked: its successor's term is larger, and the
/// paused one can no longer proclaim (its lost signal fires).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_outranked_and_cannot_proclaim() {
    let server = RedisServer::start();
    let a = Client::connect(&server.url()).await.unwrap();
    let b = Client::connect(&server.url()).await.unwrap();
    let short = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .wait(Wait::Forever);
    let mut paused = a
        .election_with("cfg", short)
        .unwrap()
        .campaign("a")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let successor = b
        .election_with("cfg", short)
        .unwrap()
        .campaign("b")
        .await
        .unwrap();
    assert!(successor.term() > paused.term());
    let late = paused.proclaim("a-again").await;
    assert!(matches!(late, Err(Error::Lost { .. })), "{late:?}");
    assert!(matches!(
        paused.lost_signal().lost(),
        Some(LostReason::Expired | LostReason::Taken)
    ));
    let leader = a.election("cfg").unwrap().leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("b", successor.term())
    );
    // The paused leader's resign leaves the successor alone.
    assert!(paused.resign().await.is_err());
    assert_eq!(
        a.election("cfg")
            .unwrap()
            .leader()
            .await
            .unwrap()
            .unwrap()
            .value,
        "b"
    );
    successor.resign().await.unwrap();
}

/// The blocking API has the same verbs.
#[test]
fn the_blocking_api_elects_too() {
    let server = RedisServer::start();
    let client = dlock::blocking::Client::connect(&server.url()).unwrap();
    let election = client.election("blocking").unwrap();
    let mut observer = election.observe();
    assert_eq!(observer.next().unwrap().unwrap(), None);
    let mut leading = election.campaign("x").unwrap();
    assert_eq!(
        observer.next().unwrap().unwrap().unwrap().term,
        leading.term()
    );
    leading.proclaim("y").unwrap();
    assert_eq!(election.leader().unwrap().unwrap().value, "y");
    assert!(leading.lost().is_none());
    assert_eq!(observer.next().unwrap().unwrap().unwrap().value, "y");
    drop(leading); // resigns in the background
    assert_eq!(observer.next().unwrap().unwrap(), None);
    client.shutdown();
}

/// No election leads on a name another kind holds: `leader()` says so (WrongType), as a
/// campaign does. An observer of a client that was shut down ends with `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_kind_on_the_name_and_a_closed_client_are_errors() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let _permit = client
        .semaphore("pool", 2)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let election = client.election("pool").unwrap();
    assert!(matches!(
        election.leader().await,
        Err(Error::WrongType { .. })
    ));

    let observed = Client::connect(&server.url()).await.unwrap();
    let mut observer = observed.election("quiet").unwrap().observe();
    assert_eq!(observer.next().await.unwrap(), None);
    let waiting = tokio::spawn(async move { observer.next().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    observed.shutdown().await;
    let ended = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("an observer ends with its client")
        .unwrap();
    assert!(matches!(ended, Err(Error::Closed)), "{ended:?}");
}

/// An operator's forced release tells observers at once: the evicted leader may be dead
/// or paused, and would otherwise be reported until its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_tells_observers() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let long = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever);
    let leading = client
        .election_with("ops", long)
        .unwrap()
        .campaign("x")
        .await
        .unwrap();
    let mut observer = client.election("ops").unwrap().observe();
    assert_eq!(observer.next().await.unwrap().unwrap().term, leading.term());
    assert!(client.force_release("ops").await.unwrap().is_some());
    let seen = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("told of the forced release, not left waiting for the 30 s lease");
    assert_eq!(seen.unwrap(), None);
    drop(leading);
}

//! The read-write lock against a real redis-server.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Owner, Wait};
use dlock_testkit::RedisServer;

fn options(wait: Wait) -> LockOptions {
    LockOptions::default()
        .renewed(Duration::from_secs(5))
        .wait(wait)
        .waiter_lease(Duration::from_secs(2))
}

#[tokio::test]
async fn several_readers_hold_at_once_and_exclude_writers() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("config", options(Wait::NoWait)).unwrap();
    let mut guards = Vec::new();
    for _ in 0..3 {
        guards.push(lock.for_owner(&Owner::new()).try_read().await.unwrap());
    }
    assert_eq!(lock.readers().await.unwrap(), 3, "three readers overlap");
    assert!(matches!(lock.try_write().await, Err(Error::Busy { .. })));
    let fences: Vec<u64> = guards.iter().map(|g| g.drawn_fence().unwrap()).collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "read grants draw from the fencing counter: {fences:?}"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let writer = lock.try_write().await.unwrap();
    assert!(writer.fence().await.unwrap() > fences[2]);
    assert!(matches!(
        lock.for_owner(&Owner::new()).try_read().await,
        Err(Error::Busy { .. })
    ));
    assert!(matches!(lock.try_write().await, Err(Error::Busy { .. })));
    writer.unlock().await.unwrap();
}

/// Readers and writers over several clients; returns true if any writer ever overlapped
/// a reader or another writer.
async fn overlap_seen(server: &RedisServer, locked: bool) -> bool {
    let readers = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let violated = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..12 {
        let client = Client::connect(&server.url()).await.unwrap();
        let lock = client
            .rwlock_with("config", options(Wait::Timeout(Duration::from_secs(30))))
            .unwrap();
        let (readers, writing, violated) = (readers.clone(), writing.clone(), violated.clone());
        tasks.push(tokio::spawn(async move {
            let owner = Owner::new();
            for _ in 0..6 {
                if task % 3 == 0 {
                    let guard = if locked {
                        Some(lock.write().await.unwrap())
                    } else {
                        None
                    };
                    if writing.swap(true, Ordering::SeqCst) || readers.load(Ordering::SeqCst) > 0 {
                        violated.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    writing.store(false, Ordering::SeqCst);
                    if let Some(guard) = guard {
                        guard.unlock().await.unwrap();
                    }
                } else {
                    let guard = if locked {
                        Some(lock.for_owner(&owner).read().await.unwrap())
                    } else {
                        None
                    };
                    readers.fetch_add(1, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) {
                        violated.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    if let Some(guard) = guard {
                        guard.unlock().await.unwrap();
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    violated.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_never_overlap_readers_or_writers() {
    let server = RedisServer::start();
    assert!(!overlap_seen(&server, true).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn negative_control_unlocked_writers_overlap() {
    let server = RedisServer::start();
    assert!(overlap_seen(&server, false).await);
}

/// Waits until `done` holds, polling every 5 ms for up to 10 s; `what` names the state.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Readers that keep arriving do not starve a writer: once it queues, new readers wait
/// behind it.
///
/// Each reader's next read arrives before its last one leaves (a fresh owner, so it is a
/// new reader, not a re-entry), so the readers keep the lock held without a gap: a writer
/// that readers did not wait for would never get in. (Readers that left a gap between
/// reads, staggered, let a writer in through a gap now and then, and left the lock
/// without a reader in about one look in a hundred.) A reader whose next read is refused
/// lets go of its last one and waits, as a reader behind a queued writer must.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_gets_in_while_readers_keep_arriving() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let mut readers = Vec::new();
    for i in 0..4usize {
        let lock = client
            .rwlock_with("config", options(Wait::Timeout(Duration::from_secs(30))))
            .unwrap();
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            let mut held = lock.for_owner(&Owner::new()).read().await.unwrap();
            reads[i].fetch_add(1, Ordering::SeqCst); // counts grants
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let next = match lock.for_owner(&Owner::new()).try_read().await {
                    Ok(next) => {
                        held.unlock().await.unwrap();
                        next
                    }
                    Err(Error::Busy { .. }) => {
                        held.unlock().await.unwrap();
                        lock.for_owner(&Owner::new()).read().await.unwrap()
                    }
                    Err(err) => panic!("reader {i}: {err}"),
                };
                held = next;
                reads[i].fetch_add(1, Ordering::SeqCst);
            }
            held.unlock().await.unwrap();
        }));
    }
    let read_counts = || -> Vec<usize> { reads.iter().map(|r| r.load(Ordering::SeqCst)).collect() };
    until("every reader read", || read_counts().iter().all(|&n| n > 0)).await;
    let lock = client
        .rwlock_with("config", options(Wait::Timeout(Duration::from_secs(10))))
        .unwrap();
    assert!(
        lock.readers().await.unwrap() > 0,
        "readers are active when the writer arrives"
    );
    let writer = lock.write().await.expect("the writer was not starved");
    assert_eq!(lock.readers().await.unwrap(), 0);
    // No reader is let in while the writer holds: every grant from here is after it.
    let counts = read_counts();
    writer.unlock().await.unwrap();
    until("the readers read after the writer", || {
        read_counts()
            .iter()
            .zip(&counts)
            .all(|(now, then)| now > then)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.await.unwrap();
    }
}

#[tokio::test]
async fn readers_reenter_even_while_a_writer_waits() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("config", options(Wait::NoWait)).unwrap();
    let me = Owner::new();
    let first = lock.for_owner(&me).try_read().await.unwrap();
    let writer = {
        let lock = client
            .rwlock_with("config", options(Wait::Timeout(Duration::from_secs(10))))
            .unwrap();
        tokio::spawn(async move { lock.write().await })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["ZCARD", "{config}:queue"]) != 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = lock
        .for_owner(&me)
        .try_read()
        .await
        .expect("re-entry is not blocked by a waiting writer");
    assert_eq!((first.holds_at_grant(), second.holds_at_grant()), (1, 2));
    assert_eq!(second.fence().await.unwrap(), first.fence().await.unwrap());
    assert!(
        matches!(
            lock.for_owner(&Owner::new()).try_read().await,
            Err(Error::Busy { .. })
        ),
        "a new reader waits behind the writer"
    );
    second.unlock().await.unwrap();
    assert_eq!(lock.readers().await.unwrap(), 1, "one hold left");
    first.unlock().await.unwrap();
    let writer = writer
        .await
        .unwrap()
        .expect("the writer got in after the last hold");
    writer.unlock().await.unwrap();
}

/// The read lock `config` on a server of its own, two owners (`me`, `other`), and what
/// they hold of it: `me` two read holds, `other` one.
async fn two_owners() -> (
    RedisServer,
    dlock::RwLock,
    [Owner; 2],
    [dlock::ReadGuard; 2],
    dlock::ReadGuard,
) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("config", options(Wait::NoWait)).unwrap();
    let (me, other) = (Owner::new(), Owner::new());
    let theirs = lock.for_owner(&other).try_read().await.unwrap();
    let first = lock.for_owner(&me).try_read().await.unwrap();
    let second = lock.for_owner(&me).try_read().await.unwrap();
    (server, lock, [me, other], [first, second], theirs)
}

/// Calls of `HINCRBY` and `HDEL` since the last `CONFIG RESETSTAT` (scripts' own
/// included), and every count for the failure's message.
fn counts_and_deletes(server: &RedisServer) -> ((u64, u64), String) {
    let calls = server.command_calls();
    let of = |command: &str| calls.get(command).copied().unwrap_or(0);
    ((of("hincrby"), of("hdel")), format!("{calls:?}"))
}

/// The hold count the read hash `config` keeps for `owner`.
fn count_of(server: &RedisServer, owner: &Owner) -> i64 {
    server.cmd(&["HGET", "config", &format!("o:{}", owner.id())])
}

/// The owners' count and fence fields of the read hash `config`, sorted.
fn owner_fields(server: &RedisServer) -> Vec<String> {
    let mut fields: Vec<String> = server.cmd(&["HKEYS", "config"]);
    fields.retain(|f| f.starts_with("o:") || f.starts_with("f:"));
    fields.sort();
    fields
}

/// What `owner_fields` holds for `owners`.
fn fields_of(owners: &[&Owner]) -> Vec<String> {
    let mut fields: Vec<String> = owners
        .iter()
        .flat_map(|owner| [format!("o:{}", owner.id()), format!("f:{}", owner.id())])
        .collect();
    fields.sort();
    fields
}

#[tokio::test]
async fn an_owners_last_hold_leaves_with_its_count_and_fence_in_one_write() {
    let (server, lock, [me, other], [first, second], others) = two_owners().await;
    let both = fields_of(&[&me, &other]);
    assert_eq!(owner_fields(&server), both);

    // A hold of an owner that holds another counts down, and keeps the owner's fields.
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    second.unlock().await.unwrap();
    let (counted, stats) = counts_and_deletes(&server);
    assert_eq!(counted, (1, 1), "{stats}");
    assert_eq!(count_of(&server, &me), 1);
    assert_eq!(owner_fields(&server), both);

    // The owner's last hold takes count and fence with it in its one HDEL: nothing counts
    // down (the release read the count with the hold).
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    first.unlock().await.unwrap();
    let (counted, stats) = counts_and_deletes(&server);
    assert_eq!(counted, (0, 1), "{stats}");
    assert_eq!(owner_fields(&server), fields_of(&[&other]));
    assert_eq!(lock.readers().await.unwrap(), 1);
    others.unlock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "config"]), 0);
}

#[tokio::test]
async fn a_hold_given_back_through_another_owners_handle_counts_its_own_owner_down() {
    let (server, lock, [me, other], [first, second], theirs) = two_owners().await;
    // By token, through a handle of the other owner, whose count is 1: the release names
    // that owner, but the hold's entry names mine, and mine counts down (2 -> 1), keeping
    // my count and fence for the hold I still have.
    lock.for_owner(&other)
        .reader()
        .release_token(second.token())
        .await
        .unwrap();
    assert_eq!(count_of(&server, &me), 1, "my one hold left is counted");
    assert_eq!(owner_fields(&server), fields_of(&[&me, &other]));
    // My hold left still re-enters as mine: the same fence, a count of 2 again.
    let again = lock.for_owner(&me).try_read().await.unwrap();
    assert_eq!(again.holds_at_grant(), 2);
    assert_eq!(again.fence().await.unwrap(), first.fence().await.unwrap());
    drop(second); // its hold is gone already: nothing to give back
    for guard in [again, first, theirs] {
        guard.unlock().await.unwrap();
    }
    assert_eq!(server.cmd::<i64>(&["EXISTS", "config"]), 0);
}

#[tokio::test]
async fn a_writer_downgrades_without_a_gap() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("config", options(Wait::NoWait)).unwrap();
    let writer = lock.try_write().await.unwrap();
    let fence = writer.fence().await.unwrap();
    let read = writer.downgrade().await.unwrap();
    assert_eq!(read.fence().await.unwrap(), fence);
    let kind: String = server.cmd(&["TYPE", "config"]);
    assert_eq!(
        kind, "hash",
        "the writer's token was replaced by the read holds"
    );
    assert_eq!(lock.readers().await.unwrap(), 1);
    assert!(
        matches!(lock.try_write().await, Err(Error::Busy { .. })),
        "still read-held"
    );
    let other = lock
        .for_owner(&Owner::new())
        .try_read()
        .await
        .expect("other readers may join");
    other.unlock().await.unwrap();
    read.unlock().await.unwrap();
    lock.try_write().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn one_readers_expiry_does_not_release_another() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let short = client
        .rwlock_with(
            "config",
            LockOptions::default()
                .ttl(Duration::from_millis(300))
                .wait(Wait::NoWait),
        )
        .unwrap();
    let long = client.rwlock_with("config", options(Wait::NoWait)).unwrap();
    let expiring = short.for_owner(&Owner::new()).try_read().await.unwrap();
    let staying = long.for_owner(&Owner::new()).try_read().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(long.readers().await.unwrap(), 1);
    assert!(
        matches!(long.try_write().await, Err(Error::Busy { .. })),
        "the other reader still holds"
    );
    assert!(matches!(expiring.unlock().await, Err(Error::Lost { .. })));
    assert_eq!(staying.lost_signal().lost(), None);
    staying.unlock().await.unwrap();
    long.try_write().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn readers_held_back_by_a_writer_that_gives_up_proceed_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // Long waiter leases and slow polling: only the announcement can let the reader in.
    let slow = |wait| {
        options(wait)
            .waiter_lease(Duration::from_secs(60))
            .backoff(Duration::from_secs(20), Duration::from_secs(20))
    };
    let lock = client.rwlock_with("config", slow(Wait::NoWait)).unwrap();
    let first_reader = lock.for_owner(&Owner::new()).try_read().await.unwrap();
    let impatient = client
        .rwlock_with("config", slow(Wait::Timeout(Duration::from_millis(500))))
        .unwrap();
    let writer = tokio::spawn(async move { impatient.write().await });
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["ZCARD", "{config}:queue"]) != 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reader_lock = client.rwlock_with("config", slow(Wait::Forever)).unwrap();
    let second_reader =
        tokio::spawn(async move { reader_lock.for_owner(&Owner::new()).read().await });
    assert!(matches!(writer.await.unwrap(), Err(Error::TimedOut { .. })));
    // Without the announcement the reader would look again only after 20 s.
    let second = tokio::time::timeout(Duration::from_secs(8), second_reader)
        .await
        .expect("let in once the writer left the queue")
        .unwrap()
        .unwrap();
    assert_eq!(lock.readers().await.unwrap(), 2);
    second.unlock().await.unwrap();
    first_reader.unlock().await.unwrap();
}

#[tokio::test]
async fn a_crashed_writer_waiter_holds_readers_back_only_for_its_waiter_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client
        .rwlock_with("config", options(Wait::NoWait).ttl(Duration::from_secs(30)))
        .unwrap();
    let writer = lock.try_write().await.unwrap();
    // A writer that queued and then crashed: its place (lease ends in 1 s) is all that
    // is left of it; nobody will wake anyone for it.
    let (secs, micros): (u64, u64) = server.cmd(&["TIME"]);
    let now_ms = secs * 1000 + micros / 1000;
    let _: i64 = server.cmd(&[
        "ZADD",
        "{config}:queue",
        &(now_ms * 1000).to_string(),
        "ghost",
    ]);
    let _: i64 = server.cmd(&[
        "ZADD",
        "{config}:queue-leases",
        &(now_ms + 1000).to_string(),
        "ghost",
    ]);
    let reader_lock = client
        .rwlock_with("config", options(Wait::Timeout(Duration::from_secs(20))))
        .unwrap();
    let reader = tokio::spawn(async move { reader_lock.for_owner(&Owner::new()).read().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    writer.unlock().await.unwrap();
    // The release woke the ghost, not the reader; the reader must look again when the
    // ghost's waiter lease ends (1 s), not when the old writer's lease would have (30 s).
    let read = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the reader waited for the old writer's whole lease")
        .unwrap()
        .unwrap();
    read.unlock().await.unwrap();
}

/// A write token given back by token after readers took the name: `Lost` (it no longer
/// holds it), and the readers are untouched.
#[tokio::test]
async fn a_stale_write_token_released_by_token_is_lost_and_readers_stay() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("config", options(Wait::NoWait)).unwrap();
    let stale = lock.try_write().await.unwrap().into_token();
    lock.writer().release_token(&stale).await.unwrap();
    let reader = lock.try_read().await.unwrap();
    assert!(
        matches!(
            lock.writer().release_token(&stale).await,
            Err(Error::Lost { .. })
        ),
        "a stale write token is not held any more"
    );
    assert_eq!(lock.readers().await.unwrap(), 1);
    reader.unlock().await.unwrap();
}

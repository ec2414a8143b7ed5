//! Direct hand-off: a release grants the lock to the first waiter in line in the same
//! script and tells that waiter alone, which then holds it without sending anything (fair
//! mutex, write lock, semaphore).

mod common;

use std::time::{Duration, Instant};

use common::{script, Held};
use dlock::{Client, LockOptions, Wait};
use dlock_testkit::RedisServer;

/// The kinds that queue their waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queued {
    Fair,
    Write,
    /// A semaphore of one permit.
    Permit,
}

const QUEUED: [Queued; 3] = [Queued::Fair, Queued::Write, Queued::Permit];

/// A fixed lease shorter than the waiter lease (so a direct grant needs no attempt to
/// restore a fixed lease's whole ttl), waiting at most 20 s.
fn options() -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_secs(5))
        .wait(Wait::Timeout(Duration::from_secs(20)))
}

async fn take(client: &Client, kind: Queued, name: &str, options: LockOptions) -> Held {
    match kind {
        Queued::Fair => Held::Mutex(
            client
                .fair_mutex_with(name, options)
                .unwrap()
                .lock()
                .await
                .unwrap(),
        ),
        Queued::Write => Held::Write(
            client
                .rwlock_with(name, options)
                .unwrap()
                .write()
                .await
                .unwrap(),
        ),
        Queued::Permit => Held::Permit(
            client
                .semaphore_with(name, 1, options)
                .unwrap()
                .lock()
                .await
                .unwrap(),
        ),
    }
}

/// The token holding `name` now (for a semaphore, its one permit's), if any.
fn holder(server: &RedisServer, kind: Queued, name: &str) -> Option<String> {
    if kind != Queued::Permit {
        return server.cmd(&["GET", name]);
    }
    let fields: Vec<String> = server.cmd(&["HKEYS", name]);
    fields
        .iter()
        .find_map(|field| field.strip_prefix("h:").map(str::to_string))
}

/// How many of `name`'s queue keys exist (the queue, the waiter leases).
fn queue_left(server: &RedisServer, name: &str) -> i64 {
    server.cmd(&[
        "EXISTS",
        &format!("{{{name}}}:queue"),
        &format!("{{{name}}}:queue-leases"),
    ])
}

fn queued(server: &RedisServer, name: &str) -> i64 {
    server.cmd(&["ZCARD", &format!("{{{name}}}:queue")])
}

async fn until_queued(server: &RedisServer, name: &str, waiters: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while queued(server, name) < waiters {
        assert!(Instant::now() < deadline, "{name}: waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The wake channels of `name` once at least one is subscribed. A waiter subscribes after
/// the attempt that queued it, so a queue place alone does not mean a channel yet. (Well
/// within the 5 s lease of `options()`, which a holder must not outlive unnoticed.)
async fn wake_channels(server: &RedisServer, name: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let channels: Vec<String> =
            server.cmd(&["PUBSUB", "CHANNELS", &format!("{{{name}}}:wake:*")]);
        if !channels.is_empty() {
            return channels;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no waiter ever subscribed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the one waiter of `name` queued, subscribed to its channel and re-checked
/// the lock (two attempts since the stats were reset): it sleeps until told.
async fn until_sleeping(server: &RedisServer, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let channels: Vec<String> =
            server.cmd(&["PUBSUB", "CHANNELS", &format!("{{{name}}}:wake:*")]);
        let attempts = server.command_calls().get("evalsha").copied().unwrap_or(0);
        if !channels.is_empty() && attempts >= 2 && queued(server, name) == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: the waiter never settled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The server's clock in ms.
fn server_ms(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = server.cmd(&["TIME"]);
    secs * 1000 + micros / 1000
}

/// Puts a waiter that will never act (it died after its last check-in) in `name`'s
/// queue: its waiter lease ends in `lease_ms`, and its token `ghost` names the ttl of the
/// hold it asked for (`<token>~<ttl ms>`, see `queue.lua`).
fn ghost_waiter(server: &RedisServer, name: &str, ghost: &str, lease_ms: u64) {
    let now = server_ms(server);
    let _: i64 = server.cmd(&[
        "ZADD",
        &format!("{{{name}}}:queue"),
        &(now * 1000).to_string(),
        ghost,
    ]);
    let _: i64 = server.cmd(&[
        "ZADD",
        &format!("{{{name}}}:queue-leases"),
        &(now + lease_ms).to_string(),
        ghost,
    ]);
}

/// Holds `name` as `kind` and starts a waiter of the same kind behind it, once it sleeps
/// until told (queued, subscribed, done re-checking); the server's statistics were reset
/// before the waiter started. Returns the hold, its fence and the waiter.
async fn held_with_a_sleeping_waiter(
    server: &RedisServer,
    client: &Client,
    kind: Queued,
    name: &str,
) -> (Held, u64, tokio::task::JoinHandle<Held>) {
    let first = take(client, kind, name, options()).await;
    let fence = first.fence().await.unwrap();
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let waiter = tokio::spawn({
        let (client, name) = (client.clone(), name.to_string());
        async move { take(&client, kind, &name, options()).await }
    });
    until_sleeping(server, name).await;
    (first, fence, waiter)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_in_line_is_handed_the_lock_and_sends_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("handoff-{kind:?}");
        let (first, fence_before, waiter) =
            held_with_a_sleeping_waiter(&server, &client, kind, &name).await;

        let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
        first.unlock().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was never handed the lock")
            .unwrap();
        let calls = server.command_calls();
        let scripts = calls.get("evalsha").copied().unwrap_or(0);
        assert_eq!(
            scripts, 1,
            "{kind:?}: only the release ran, the waiter sent nothing: {calls:?}"
        );
        assert_eq!(
            holder(&server, kind, &name).as_deref(),
            Some(second.token()),
            "{kind:?}: the key holds the waiter's grant"
        );
        assert!(
            second.fence().await.unwrap() > fence_before,
            "{kind:?}: the grant drew a fence"
        );
        assert!(second.remaining() > Duration::from_secs(2), "{kind:?}");
        second.unlock().await.unwrap();
        assert_eq!(holder(&server, kind, &name), None, "{kind:?}: released");
        assert_eq!(
            queue_left(&server, &name),
            0,
            "{kind:?}: nothing of the queue left"
        );
    }

    // Negative control: the plain mutex's waiter is only woken, and takes the lock with
    // an attempt of its own: the count sees it.
    let plain = client.mutex_with("plain", options()).unwrap();
    let first = plain.lock().await.unwrap();
    let waiter = tokio::spawn({
        let plain = plain.clone();
        async move { plain.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    first.unlock().await.unwrap();
    let second = waiter.await.unwrap();
    assert!(
        server.total_calls() >= 2,
        "the count cannot see a waiter's own attempt"
    );
    second.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_direct_grant_to_a_waiter_that_died_is_reclaimed_within_its_waiter_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("ghost-{kind:?}");
        let first = take(&client, kind, &name, options()).await;
        // Died after its last check-in: its place lasts 1.5 s more, and it asked for
        // holds of a minute.
        ghost_waiter(&server, &name, "ghost~60000", 1500);
        let waiter = tokio::spawn({
            let (client, name) = (client.clone(), name.clone());
            async move {
                let options = options().waiter_lease(Duration::from_secs(20));
                take(&client, kind, &name, options).await
            }
        });
        until_queued(&server, &name, 2).await;

        first.unlock().await.unwrap();
        // The release handed the lock to the dead waiter (so this test sees the case it
        // is about) ...
        assert_eq!(holder(&server, kind, &name).as_deref(), Some("ghost~60000"));
        // ... for no longer than the rest of its waiter lease, not the minute it asked.
        let left: i64 = if kind == Queued::Permit {
            let entry: String = server.cmd(&["HGET", &name, "h:ghost~60000"]);
            let ends: u64 = entry.split('|').next().unwrap().parse().unwrap();
            ends as i64 - server_ms(&server) as i64
        } else {
            server.cmd(&["PTTL", &name])
        };
        assert!(
            (0..=1500).contains(&left),
            "{kind:?}: the dead waiter's grant lasts {left} ms"
        );
        // The live waiter behind it gets the lock once that grant has run out.
        let second = tokio::time::timeout(Duration::from_secs(15), waiter)
            .await
            .expect("the lock was never reclaimed from the dead waiter")
            .unwrap();
        assert_eq!(
            holder(&server, kind, &name).as_deref(),
            Some(second.token())
        );
        second.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_direct_grant_to_a_waiter_whose_future_was_dropped_is_given_back() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // Leases of a minute: were the grant not given back, the last waiter would wait it out.
    let long = LockOptions::default()
        .ttl(Duration::from_secs(60))
        .waiter_lease(Duration::from_secs(60))
        .wait(Wait::Timeout(Duration::from_secs(30)));
    for kind in QUEUED {
        let name = format!("dropped-{kind:?}");
        let first = take(&client, kind, &name, long).await;
        let first_token = first.token().to_string();
        // The waiter's future is polled until it queues, then left unpolled: it cannot
        // hear the grant.
        let handle_client = client.clone();
        let mut dropped = Box::pin(take(&handle_client, kind, &name, long));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut dropped)
                .await
                .is_err(),
            "{kind:?}: the waiter got the lock while it was held"
        );
        until_queued(&server, &name, 1).await;
        let last = tokio::spawn({
            let (client, name) = (client.clone(), name.clone());
            async move { take(&client, kind, &name, long).await }
        });
        until_queued(&server, &name, 2).await;

        first.unlock().await.unwrap();
        let granted = holder(&server, kind, &name).expect("the lock was handed on");
        assert_ne!(granted, first_token);
        // Control: the lock went to the waiter whose future is about to be dropped.
        assert_eq!(
            queued(&server, &name),
            1,
            "{kind:?}: one waiter left in line"
        );

        drop(dropped);
        let last = tokio::time::timeout(Duration::from_secs(15), last)
            .await
            .expect("the dropped waiter's grant was never given back")
            .unwrap();
        assert_ne!(last.token(), granted);
        assert_eq!(holder(&server, kind, &name).as_deref(), Some(last.token()));
        last.unlock().await.unwrap();
        assert_eq!(
            queue_left(&server, &name),
            0,
            "{kind:?}: nothing of the queue left"
        );
    }
}

#[tokio::test]
async fn a_resent_release_with_a_direct_hand_off_grants_once() {
    let server = RedisServer::start();
    let mut conn = common::raw_conn(&server).await;
    for kind in QUEUED {
        let _: () = server.cmd(&["FLUSHALL"]);
        let (files, keys, args): (&[&str], &[&str], &[&str]) = match kind {
            Queued::Fair => {
                let _: () = server.cmd(&["SET", "k", "tok", "PX", "60000"]);
                (
                    &["queue/queue.lua", "mutex/fair_release.lua"],
                    &["k", "{k}:queue", "{k}:queue-leases", "{k}:fence"],
                    &["tok", "{k}:wake:"],
                )
            }
            Queued::Write => {
                let _: () = server.cmd(&["SET", "k", "tok", "PX", "60000"]);
                (
                    &[
                        "queue/queue.lua",
                        "lua/entries.lua",
                        "rwlock/rwlock.lua",
                        "rwlock/write_release.lua",
                    ],
                    common::RW_KEYS,
                    &["tok", "{k}:wake:", "{k}:released"],
                )
            }
            Queued::Permit => {
                let ends = (server_ms(&server) + 60_000).to_string();
                let _: () = server.cmd(&[
                    "HSET",
                    "k",
                    "~kind",
                    "semaphore",
                    "~ends",
                    &ends,
                    "h:tok",
                    &format!("{ends}|1"),
                ]);
                let _: i64 = server.cmd(&["ZADD", "{k}:expiry", &ends, "tok"]);
                (
                    &[
                        "queue/queue.lua",
                        "lua/entries.lua",
                        "semaphore/permits.lua",
                        "semaphore/release.lua",
                    ],
                    &[
                        "k",
                        "{k}:queue",
                        "{k}:queue-leases",
                        "{k}:expiry",
                        "{k}:fence",
                    ],
                    &["tok", "{k}:wake:", "1"],
                )
            }
        };
        ghost_waiter(&server, "k", "first~30000", 30_000);
        ghost_waiter(&server, "k", "second~30000", 30_000);
        let release = script(files);
        let mut call = release.prepare_invoke();
        for key in keys {
            call.key(*key);
        }
        for arg in args {
            call.arg(*arg);
        }
        let first_reply: i64 = call.invoke_async(&mut conn).await.unwrap();
        assert_eq!(first_reply, 1, "{kind:?}");
        let fence: i64 = server.cmd(&["GET", "{k}:fence"]);
        // The reply was lost; the release is sent again.
        let resent: i64 = call.invoke_async(&mut conn).await.unwrap();
        assert_eq!(resent, 0, "{kind:?}: the resend finds the hold gone");

        assert_eq!(
            holder(&server, kind, "k").as_deref(),
            Some("first~30000"),
            "{kind:?}"
        );
        let second_waits: Option<String> = server.cmd(&["ZSCORE", "{k}:queue", "second~30000"]);
        assert!(
            second_waits.is_some(),
            "{kind:?}: the resend granted a second waiter"
        );
        let fence_after: i64 = server.cmd(&["GET", "{k}:fence"]);
        assert_eq!(fence_after, fence, "{kind:?}: one fence drawn");

        // Control: a release by the first waiter does hand the lock to the second, so the
        // checks above would see a second grant.
        let mut control = release.prepare_invoke();
        for key in keys {
            control.key(*key);
        }
        control.arg("first~30000");
        for arg in &args[1..] {
            control.arg(*arg);
        }
        let released: i64 = control.invoke_async(&mut conn).await.unwrap();
        assert_eq!(released, 1, "{kind:?}");
        assert_eq!(
            holder(&server, kind, "k").as_deref(),
            Some("second~30000"),
            "{kind:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_hands_a_permit_on_by_the_waiters_own_n() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let wide = client.semaphore_with("pool", 5, options()).unwrap();
    let x = wide.lock().await.unwrap();
    let y = wide.lock().await.unwrap();
    // A client that allows one holder waits while any permit is held.
    let narrow = client.semaphore_with("pool", 1, options()).unwrap();
    let waiter = tokio::spawn(async move { narrow.lock().await.unwrap() });
    until_queued(&server, "pool", 1).await;

    x.unlock().await.unwrap();
    // The release's own N (5) would let it in beside y; its own N (1) does not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "a permit was handed on past the waiter's N"
    );
    assert_eq!(queued(&server, "pool"), 1);

    y.unlock().await.unwrap();
    let permit = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter never got a permit")
        .unwrap();
    assert_eq!(
        holder(&server, Queued::Permit, "pool").as_deref(),
        Some(permit.token())
    );
    permit.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_handed_the_lock_starts_with_its_whole_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // The defaults: a 30 s lease renewed, a 30 s waiter lease (a waiter lease shorter than
    // the lease is the case where the grant may be shorter and the waiter attempts once).
    // Either way the waiter's guard must start with (nearly) 30 s.
    let defaults = LockOptions::default().wait(Wait::Timeout(Duration::from_secs(20)));
    for kind in QUEUED {
        let name = format!("whole-{kind:?}");
        let first = take(&client, kind, &name, defaults).await;
        let waiter = tokio::spawn({
            let (client, name) = (client.clone(), name.clone());
            async move { take(&client, kind, &name, defaults).await }
        });
        until_queued(&server, &name, 1).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        first.unlock().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("never handed the lock")
            .unwrap();
        assert!(
            second.remaining() > Duration::from_secs(25),
            "{kind:?}: a fresh guard believes {:?} left",
            second.remaining()
        );
        let left: i64 = server.cmd(&["PTTL", &name]);
        assert!(left > 25_000, "{kind:?}: the key's lease is {left} ms");
        second.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_reader_hands_the_write_lock_to_the_waiting_writer() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("cfg", options()).unwrap();
    let r1 = lock.for_owner(&dlock::Owner::new()).read().await.unwrap();
    let r2 = lock.for_owner(&dlock::Owner::new()).read().await.unwrap();
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await.unwrap() }
    });
    until_sleeping(&server, "cfg").await;
    r1.unlock().await.unwrap();
    assert!(!writer.is_finished(), "a writer beside a reader");
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    r2.unlock().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer was never handed the lock")
        .unwrap();
    let scripts = server.command_calls().get("evalsha").copied().unwrap_or(0);
    assert_eq!(scripts, 1, "only the last reader's release ran");
    assert_eq!(
        holder(&server, Queued::Write, "cfg").as_deref(),
        Some(writer.token())
    );
    writer.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_survive_a_lost_expiry_index() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // Read holds: the index evicted (or never made, by an older dlock) must not make
    // live readers vanish.
    let lock = client.rwlock_with("cfg", options()).unwrap();
    let first = lock.for_owner(&dlock::Owner::new()).read().await.unwrap();
    let _: i64 = server.cmd(&["DEL", "{cfg}:expiry"]);
    let second = lock.for_owner(&dlock::Owner::new()).read().await.unwrap();
    second.unlock().await.unwrap();
    assert!(
        first.is_held().await.unwrap(),
        "the first reader was purged"
    );
    assert!(
        matches!(lock.try_write().await, Err(dlock::Error::Busy { .. })),
        "a writer got in beside a live reader"
    );
    let _: i64 = server.cmd(&["DEL", "{cfg}:expiry"]);
    let mut renewed = first;
    renewed.extend(Duration::from_secs(5)).await.unwrap();
    let indexed: i64 = server.cmd(&["ZCARD", "{cfg}:expiry"]);
    assert_eq!(indexed, 1, "the renewal rebuilt the index");
    renewed.unlock().await.unwrap();

    // Permits: a semaphore of 2 with both permits taken stays full.
    let pool = client.semaphore_with("pool", 2, options()).unwrap();
    let a = pool.lock().await.unwrap();
    let b = pool.lock().await.unwrap();
    let _: i64 = server.cmd(&["DEL", "{pool}:expiry"]);
    assert!(
        matches!(pool.try_lock().await, Err(dlock::Error::Busy { .. })),
        "a third permit past N"
    );
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
}

/// A release whose own hold is missing from a lost index finds the index empty after its
/// removal, but its `ZREM` found nothing: the shortcut that deletes the whole hash when the
/// index empties must not fire then, or every other live hold would go with it.
#[tokio::test]
async fn a_release_with_a_lost_index_keeps_the_other_holds() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.rwlock_with("cfg", options()).unwrap();
    let first = lock.for_owner(&dlock::Owner::new()).read().await.unwrap();
    let second = lock.for_owner(&dlock::Owner::new()).read().await.unwrap();
    let _: i64 = server.cmd(&["DEL", "{cfg}:expiry"]);
    first.unlock().await.unwrap();
    assert!(
        second.is_held().await.unwrap(),
        "the second reader vanished"
    );
    assert!(
        matches!(lock.try_write().await, Err(dlock::Error::Busy { .. })),
        "a writer got in beside a live reader"
    );
    second.unlock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "cfg", "{cfg}:expiry"]), 0);

    let pool = client.semaphore_with("pool", 2, options()).unwrap();
    let a = pool.lock().await.unwrap();
    let b = pool.lock().await.unwrap();
    let _: i64 = server.cmd(&["DEL", "{pool}:expiry"]);
    a.unlock().await.unwrap();
    assert!(b.is_held().await.unwrap(), "the second permit vanished");
    assert_eq!(pool.held().await.unwrap(), 1);
    b.unlock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "pool", "{pool}:expiry"]), 0);
}

#[tokio::test]
async fn a_release_survives_thousands_of_dead_waiters() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let fair = client.fair_mutex_with("crowd", options()).unwrap();
    let held = fair.lock().await.unwrap();
    // 9 000 waiters that died long ago (their waiter leases ended).
    let now = server_ms(&server);
    let mut queue = vec!["ZADD".to_string(), "{crowd}:queue".into()];
    let mut leases = vec!["ZADD".to_string(), "{crowd}:queue-leases".into()];
    for i in 0..9000u64 {
        queue.extend([(now * 1000 + i).to_string(), format!("dead{i}")]);
        leases.extend([(now - 1000).to_string(), format!("dead{i}")]);
    }
    for args in [&queue, &leases] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let _: i64 = server.cmd(&args);
    }
    held.unlock().await.unwrap();
    assert_eq!(queue_left(&server, "crowd"), 0, "the dead were purged");
    let again = fair.try_lock().await.unwrap();
    again.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_that_cannot_draw_the_hand_off_fence_still_releases() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("broken-{kind:?}");
        let first = take(&client, kind, &name, options()).await;
        let waiter = tokio::spawn({
            let (client, name) = (client.clone(), name.clone());
            async move {
                match kind {
                    Queued::Fair => client
                        .fair_mutex_with(&name, options())
                        .unwrap()
                        .lock()
                        .await
                        .map(drop),
                    Queued::Write => client
                        .rwlock_with(&name, options())
                        .unwrap()
                        .write()
                        .await
                        .map(drop),
                    Queued::Permit => client
                        .semaphore_with(&name, 1, options())
                        .unwrap()
                        .lock()
                        .await
                        .map(drop),
                }
            }
        });
        until_queued(&server, &name, 1).await;
        // Someone broke the fencing counter: no fence can be drawn for a grant.
        let _: () = server.cmd(&["SET", &format!("{{{name}}}:fence"), "not a number"]);
        first.unlock().await.expect("the release itself succeeds");
        assert_eq!(
            holder(&server, kind, &name),
            None,
            "{kind:?}: nothing granted"
        );
        // The waiter was woken, and its own attempt says what is wrong.
        let outcome = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was never woken")
            .unwrap();
        assert!(
            matches!(outcome, Err(dlock::Error::WrongType { .. })),
            "{kind:?}: {outcome:?}"
        );
        assert_eq!(holder(&server, kind, &name), None, "{kind:?}: nothing held");
    }
}

/// The queued waiters of one client share one channel per lock, and each line of a message
/// there names the token it is for: a release hands the lock to the first in line alone,
/// however many waiters of that client listen. The check that exactly one waiter believes
/// it holds is shown able to fail: a word forged for the last waiter makes it believe so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_one_client_share_a_channel_and_each_hears_only_its_own_word() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("shared-{kind:?}");
        let mut held = take(&client, kind, &name, options()).await;
        let mut waiters = Vec::new();
        for n in 1..=3 {
            waiters.push(tokio::spawn({
                let (client, name) = (client.clone(), name.clone());
                async move { take(&client, kind, &name, options()).await }
            }));
            until_queued(&server, &name, n).await;
        }
        let channels = wake_channels(&server, &name).await;
        assert_eq!(channels.len(), 1, "{kind:?}: one channel: {channels:?}");
        for turn in 0..3 {
            held.unlock().await.unwrap();
            let next = tokio::time::timeout(Duration::from_secs(10), &mut waiters[turn])
                .await
                .expect("the first in line was never handed the lock")
                .unwrap();
            // Give a misdelivered word the time to reach the others.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if turn == 0 {
                // Every waiter has settled by now (the first count may have been read
                // before the last ones subscribed): still one channel.
                let channels: Vec<String> =
                    server.cmd(&["PUBSUB", "CHANNELS", &format!("{{{name}}}:wake:*")]);
                assert_eq!(channels.len(), 1, "{kind:?}: one channel: {channels:?}");
            }
            let done = waiters[turn + 1..]
                .iter()
                .filter(|w| w.is_finished())
                .count();
            assert_eq!(
                done, 0,
                "{kind:?}: turn {turn}: a waiter behind believes it holds"
            );
            assert_eq!(holder(&server, kind, &name).as_deref(), Some(next.token()));
            held = next;
        }
        held.unlock().await.unwrap();
    }

    // Negative control: a word for the last waiter, forged while the second holds, makes
    // it believe it holds too, and the check above sees that.
    let name = "shared-forged";
    let first = take(&client, Queued::Fair, name, options()).await;
    let mut waiters = Vec::new();
    for n in 1..=2 {
        waiters.push(tokio::spawn({
            let client = client.clone();
            async move { take(&client, Queued::Fair, name, options()).await }
        }));
        until_queued(&server, name, n).await;
    }
    let last: Vec<String> = server.cmd(&["ZRANGE", &format!("{{{name}}}:queue"), "1", "1"]);
    let channels = wake_channels(&server, name).await;
    first.unlock().await.unwrap();
    let second = waiters.remove(0).await.unwrap();
    // Sent again until heard: the last waiter registers its inbox just after the attempt
    // that queued it, which may be a moment after its queue place shows. Only the forged
    // word can end its wait this soon: it was told to wait out the second's 5 s lease.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !waiters[0].is_finished() {
        assert!(
            Instant::now() < deadline,
            "the check cannot see a waiter that believes it holds"
        );
        let _: i64 = server.cmd(&["PUBLISH", &channels[0], &format!("granted 7 {}", last[0])]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let believed = waiters.remove(0).await.unwrap();
    assert_eq!(
        holder(&server, Queued::Fair, name).as_deref(),
        Some(second.token()),
        "the second still holds: the last waiter's hold is the forged one"
    );
    assert_ne!(believed.token(), second.token());
    drop(second);
}

/// A raw subscriber of its own on `channels`: what the releases publish, read as sent.
struct Heard(std::pin::Pin<Box<dyn futures_util::Stream<Item = redis::Msg>>>);

impl Heard {
    async fn on(server: &RedisServer, channels: &[&str]) -> Heard {
        let mut pubsub = redis::Client::open(server.url())
            .unwrap()
            .get_async_pubsub()
            .await
            .unwrap();
        for channel in channels {
            pubsub.subscribe(*channel).await.unwrap();
        }
        Heard(Box::pin(pubsub.into_on_message()))
    }

    /// The next message's channel and payload (5 s at most).
    async fn next(&mut self) -> (String, String) {
        use futures_util::StreamExt;
        let message = tokio::time::timeout(Duration::from_secs(5), self.0.next())
            .await
            .expect("nothing published")
            .unwrap();
        let channel = message.get_channel_name().to_string();
        (channel, message.get_payload().unwrap())
    }
}

/// Where a release tells a waiter: a token `<client>.<random>~<ttl>` on its client's
/// channel, named in the message (the grant and the next in line's `watch` in one message
/// when they share a client); a token of another form (an older dlock's) on a channel of
/// its own, named nowhere, and woken rather than handed the lock (it names no ttl).
#[tokio::test]
async fn a_release_addresses_each_waiter_by_its_token() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut heard = Heard::on(&server, &["{addr}:wake:abc", "{addr}:wake:legacy-token"]).await;
    let mutex = client.fair_mutex_with("addr", options()).unwrap();
    let held = mutex.lock().await.unwrap();
    ghost_waiter(&server, "addr", "abc.01~5000", 60_000);
    ghost_waiter(&server, "addr", "web/abc.02~5000", 60_000);
    held.unlock().await.unwrap();
    let (channel, payload) = heard.next().await;
    assert_eq!(channel, "{addr}:wake:abc");
    let lines: Vec<&str> = payload.lines().collect();
    assert_eq!(lines.len(), 2, "{payload:?}");
    assert!(
        lines[0].starts_with("granted ") && lines[0].ends_with(" abc.01~5000"),
        "{payload:?}"
    );
    assert!(
        lines[1].starts_with("watch ") && lines[1].ends_with(" web/abc.02~5000"),
        "{payload:?}"
    );

    // The first ghost holds now. The second leaves, and one with a token of another form
    // queues; the first ghost's hold is released by its token.
    for key in ["{addr}:queue", "{addr}:queue-leases"] {
        let _: i64 = server.cmd(&["ZREM", key, "web/abc.02~5000"]);
    }
    ghost_waiter(&server, "addr", "legacy-token", 60_000);
    mutex.release_token("abc.01~5000").await.unwrap();
    let (channel, payload) = heard.next().await;
    assert_eq!(channel, "{addr}:wake:legacy-token");
    // Its token names no ttl: it is woken to take the lock itself, as an older dlock
    // expects, and the lock is left free for it.
    assert_eq!(payload, "one");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "addr"]), 0);
}

/// After a semaphore hands a permit on, the next in line is told what its own attempt
/// would learn: `one` (look again) while a permit is still free for it, else `watch <ms>`
/// with the soonest permit lease, so that it sleeps until then (or until handed a permit)
/// and sends no attempt only to find nothing free. Ghost waiters of one client `abc`,
/// tokens `<client>.<random>~<ttl>~<N>`; the permits' own leases are 20 s and 30 s.
#[tokio::test]
async fn a_semaphore_tells_the_next_in_line_to_watch_only_when_nothing_is_free() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut heard = Heard::on(&server, &["{full}:wake:abc", "{roomy}:wake:abc"]).await;
    let lease = |secs| options().ttl(Duration::from_secs(secs));
    // Kept to the end: a release would hand the next ghost a permit and say so.
    let mut kept = Vec::new();
    for (name, permits) in [("full", 2u32), ("roomy", 3)] {
        let first = client
            .semaphore_with(name, permits, lease(30))
            .unwrap()
            .try_lock()
            .await
            .unwrap();
        let second = client
            .semaphore_with(name, permits, lease(20))
            .unwrap()
            .try_lock()
            .await
            .unwrap();
        // Ghosts asking for 60 s permits: the soonest lease after the hand-off is the
        // second holder's 20 s.
        let ghosts = [
            format!("abc.01~60000~{permits}"),
            format!("abc.02~60000~{permits}"),
        ];
        for ghost in &ghosts {
            ghost_waiter(&server, name, ghost, 120_000);
        }
        first.unlock().await.unwrap();
        let (_, payload) = heard.next().await;
        let lines: Vec<&str> = payload.lines().collect();
        assert_eq!(lines.len(), 2, "{name}: {lines:?}");
        assert!(
            lines[0].starts_with("granted ") && lines[0].ends_with(&format!(" {}", ghosts[0])),
            "{name}: {lines:?}"
        );
        let (word, to) = lines[1].split_once(' ').unwrap();
        if permits == 2 {
            // Both permits held (the second holder's and the first ghost's).
            assert_eq!(word, "watch", "{name}: {lines:?}");
            let (ms, to) = to.split_once(' ').unwrap();
            let ms: u64 = ms.parse().unwrap();
            assert!((15_000..=20_000).contains(&ms), "{name}: watch {ms} ms");
            assert_eq!(to, ghosts[1]);
        } else {
            assert_eq!(word, "one", "{name}: {lines:?}");
            assert_eq!(to, ghosts[1]);
        }
        kept.push(second);
    }
}

/// A channel stays subscribed a while after its last waiter left: a waiter of the same
/// client that comes soon after listens before its first attempt, so once queued it needs
/// neither a `SUBSCRIBE` nor a second attempt; and once nobody has waited for a while the
/// subscription goes. The first wait, with nothing subscribed yet, is the control: the
/// count sees its subscription and its second attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_waits_again_soon_subscribes_once_and_queues_in_one_attempt() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("again-{kind:?}");
        let mut counts = Vec::new();
        for _ in 0..2 {
            // The holder is another client: its own calls are not this waiter's.
            let held = take(&other, kind, &name, options()).await;
            let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
            let waiter = tokio::spawn({
                let (client, name) = (client.clone(), name.clone());
                async move { take(&client, kind, &name, options()).await }
            });
            until_queued(&server, &name, 1).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let calls = server.command_calls();
            counts.push((
                calls.get("subscribe").copied().unwrap_or(0),
                calls.get("evalsha").copied().unwrap_or(0),
            ));
            held.unlock().await.unwrap();
            let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("the waiter was never handed the lock")
                .unwrap();
            granted.unlock().await.unwrap();
        }
        assert_eq!(
            counts[0],
            (1, 2),
            "{kind:?}: the first wait subscribes and re-checks"
        );
        assert_eq!(
            counts[1],
            (0, 1),
            "{kind:?}: the next wait finds the channel live"
        );
    }
    // Nobody waits now: the subscriptions go once they have lingered.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", "*"]);
        if channels.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still subscribed: {channels:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A server at `maxmemory` (noeviction) refuses new grants, but a release still hands the
/// lock to the next in line: the hand-off's first write is the waiter leaving the queue,
/// which takes no memory, and a script's later writes are not refused. The refused new
/// acquire is the control that the server is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_server_refuses_new_grants_but_still_hands_the_lock_on() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("full-{kind:?}");
        let (first, fence_before, waiter) =
            held_with_a_sleeping_waiter(&server, &client, kind, &name).await;
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
        // Control: the server refuses what takes memory.
        let refused = client
            .fair_mutex_with(&format!("{name}-new"), options().wait(Wait::NoWait))
            .unwrap()
            .lock()
            .await;
        assert!(
            matches!(&refused, Err(dlock::Error::Refused { .. })),
            "{kind:?}: the server is not full: {refused:?}"
        );
        first.unlock().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was never handed the lock")
            .unwrap();
        assert_eq!(
            holder(&server, kind, &name).as_deref(),
            Some(second.token()),
            "{kind:?}"
        );
        assert!(second.fence().await.unwrap() > fence_before, "{kind:?}");
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
        second.unlock().await.unwrap();
    }

    // The last reader's release hands the write lock to the waiting writer, full or not.
    let lock = client.rwlock_with("full-read", options()).unwrap();
    let reader = lock.read().await.unwrap();
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await.unwrap() }
    });
    until_sleeping(&server, "full-read").await;
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    reader
        .unlock()
        .await
        .expect("a release works on a full server");
    let writer = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer was never handed the lock")
        .unwrap();
    let held: Option<String> = server.cmd(&["GET", "full-read"]);
    assert_eq!(held.as_deref(), Some(writer.token()));
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    writer.unlock().await.unwrap();
}

/// The subscriber connection dropped while a channel lingered: nothing of the old
/// subscription is trusted (the lingering channel is forgotten at reconnect), and the next
/// wait subscribes afresh and is handed the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_after_the_subscriber_reconnected_is_still_handed_the_lock() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    for kind in QUEUED {
        let name = format!("reconnect-{kind:?}");
        for round in 0..2 {
            let held = take(&other, kind, &name, options()).await;
            let waiter = tokio::spawn({
                let (client, name) = (client.clone(), name.clone());
                async move { take(&client, kind, &name, options()).await }
            });
            until_queued(&server, &name, 1).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            held.unlock().await.unwrap();
            let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap_or_else(|_| panic!("{kind:?}, round {round}: never handed the lock"))
                .unwrap();
            granted.unlock().await.unwrap();
            if round == 0 {
                // The channel lingers now; cut the subscriber connection under it.
                let killed: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
                assert!(killed >= 1, "{kind:?}: no subscriber connection to cut");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A head that cannot be handed the lock keeps its place: when no fence can be drawn it is
/// put back where it stood (its arrival, and the queue's expiry, which its leaving had
/// deleted with the emptied queue), and a token naming a ttl of 0 is woken rather than
/// granted (a grant with a 0 ms lease would fail every release of the name).
#[tokio::test]
async fn a_head_that_cannot_be_handed_the_lock_keeps_its_place() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.fair_mutex_with("stay", options()).unwrap();
    let queue = "{stay}:queue";
    let leases = "{stay}:queue-leases";

    let held = mutex.lock().await.unwrap();
    ghost_waiter(&server, "stay", "ghost~30000", 60_000);
    let arrival: String = server.cmd(&["ZSCORE", queue, "ghost~30000"]);
    let _: () = server.cmd(&["SET", "{stay}:fence", "not a number"]);
    held.unlock().await.expect("the release itself succeeds");
    assert_eq!(
        holder(&server, Queued::Fair, "stay"),
        None,
        "nothing granted"
    );
    let after: Option<String> = server.cmd(&["ZSCORE", queue, "ghost~30000"]);
    assert_eq!(
        after.as_deref(),
        Some(arrival.as_str()),
        "put back where it stood"
    );
    for key in [queue, leases] {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        assert!(pttl > 0, "{key} lost its expiry: {pttl}");
    }

    let _: i64 = server.cmd(&["DEL", "{stay}:fence", queue, leases]);
    ghost_waiter(&server, "stay", "zero~0", 60_000);
    let _: () = server.cmd(&["SET", "stay", "tok", "PX", "60000"]);
    mutex
        .release_token("tok")
        .await
        .expect("the release succeeds");
    assert_eq!(
        holder(&server, Queued::Fair, "stay"),
        None,
        "nothing granted"
    );
    let still: Option<String> = server.cmd(&["ZSCORE", queue, "zero~0"]);
    assert!(
        still.is_some(),
        "the waiter keeps its place, woken to try itself"
    );
}

//! `LockOptions::lock_delay`: a hold that ends by expiry (its holder crashed: the guard
//! given up without a release) keeps the lock ungrantable for the delay after its lease;
//! a clean release, a release by token and a forced release free it at once. Every kind,
//! renewal and extend keep the delay, Redlock keeps it on each master; the negative
//! control is the same crash without the option, granted when the lease ends.

use std::time::{Duration, Instant};

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::{
    IndependentMasters, MasterWithReplicas, RedisCluster, RedisServer, SentinelGroup,
};

mod common;
use common::{take, Held, Kind, KINDS};

const TTL: Duration = Duration::from_millis(500);
const DELAY: Duration = Duration::from_secs(2);

fn delayed() -> LockOptions {
    LockOptions::default()
        .ttl(TTL)
        .lock_delay(DELAY)
        .wait(Wait::Timeout(Duration::from_secs(20)))
}

fn waiting() -> LockOptions {
    LockOptions::default().wait(Wait::Timeout(Duration::from_secs(20)))
}

/// A private server and two clients of it (the holder's and a contender's).
async fn one_server() -> (RedisServer, Client, Client) {
    let server = RedisServer::start();
    let holder = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    (server, holder, other)
}

/// What a hold of `kind` keeps out: another of its kind, or for a read hold a writer.
fn contender(kind: Kind) -> Kind {
    match kind {
        Kind::Read => Kind::Write,
        other => other,
    }
}

/// Gives a hold up without releasing it, as a holder that crashed would.
fn crash(held: Held) {
    let _token = match held {
        Held::Mutex(g) => g.into_token(),
        Held::Reentrant(g) => g.into_token(),
        Held::Read(g) => g.into_token(),
        Held::Write(g) => g.into_token(),
        Held::Permit(g) => g.into_token(),
    };
}

/// Holds `kind` on `name` (a semaphore's two permits), crashes every hold, and answers how
/// long after the first grant a contender of `other` was granted.
async fn granted_after_a_crash(
    holder: &Client,
    other: &Client,
    kind: Kind,
    name: &str,
    options: LockOptions,
) -> Duration {
    let before = Instant::now();
    let mut held = vec![take(holder, kind, name, options, true).await.unwrap()];
    if kind == Kind::Permit {
        held.push(take(holder, kind, name, options, true).await.unwrap());
    }
    held.into_iter().for_each(crash);
    let granted = take(other, contender(kind), name, waiting(), false).await;
    let after = before.elapsed();
    granted.unwrap().unlock().await.unwrap();
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_stays_ungrantable_for_the_delay_after_a_crashed_holders_lease() {
    let (_server, holder, other) = one_server().await;
    for kind in KINDS {
        let name = format!("legacy-{kind:?}");
        let after = granted_after_a_crash(&holder, &other, kind, &name, delayed()).await;
        assert!(
            after >= TTL + DELAY,
            "{kind:?}: granted {after:?} after the crash"
        );
        // The negative control: without the option the lease's end frees it.
        let name = format!("plain-{kind:?}");
        let plain = LockOptions {
            lock_delay: None,
            ..delayed()
        };
        let after = granted_after_a_crash(&holder, &other, kind, &name, plain).await;
        assert!(after >= TTL, "{kind:?}: granted {after:?} after the crash");
        assert!(
            after < TTL + DELAY,
            "{kind:?} without a delay: {after:?}: slow machine?"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_release_a_release_by_token_and_a_forced_release_free_at_once() {
    let (_server, holder, other) = one_server().await;
    for kind in KINDS {
        let name = format!("clean-{kind:?}");
        let guard = take(&holder, kind, &name, delayed(), true).await.unwrap();
        guard.unlock().await.unwrap();
        let at_once = take(&other, contender(kind), &name, delayed(), true).await;
        assert!(at_once.is_ok(), "{kind:?} after unlock: {at_once:?}");
        at_once.unwrap().unlock().await.unwrap();
    }
    // By token, as `dlock release NAME TOKEN` does.
    let mutex = holder.mutex_with("by-token", delayed()).unwrap();
    let token = mutex.try_lock().await.unwrap().into_token();
    mutex.release_token(&token).await.unwrap();
    let after_token = other.mutex_with("by-token", delayed()).unwrap();
    after_token
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    // Forced by an operator.
    let _token = mutex.try_lock().await.unwrap().into_token();
    other.force_release("by-token").await.unwrap();
    after_token
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_and_extend_keep_the_delay_while_the_holders_validity_counts_the_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default().renewed(TTL).lock_delay(DELAY);
    let mutex = client.mutex_with("renewed", options).unwrap();
    let mut guard = mutex.lock().await.unwrap();
    assert!(guard.remaining() <= TTL, "{:?}", guard.remaining());
    // Several renewals later the key still outlives the lease by the delay.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let left = Duration::from_millis(server.cmd::<u64>(&["PTTL", "renewed"]));
    assert!(left > DELAY, "{left:?} left after renewals");
    guard.extend(Duration::from_secs(1)).await.unwrap();
    let left = Duration::from_millis(server.cmd::<u64>(&["PTTL", "renewed"]));
    assert!(
        left > DELAY + Duration::from_millis(500),
        "{left:?} left after extend"
    );
    assert!(
        left <= DELAY + Duration::from_secs(1),
        "{left:?} left after extend"
    );
    guard.unlock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "renewed"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_keeps_the_delay_on_each_master() {
    let masters = IndependentMasters::start(3);
    let first = Client::redlock(masters.urls()).await.unwrap();
    let second = Client::redlock(masters.urls()).await.unwrap();
    let before = Instant::now();
    let _token = (first.mutex_with("legacy", delayed()).unwrap().lock().await)
        .unwrap()
        .into_token();
    // Granted by a majority (a slower master's request may still be on its way).
    let kept = (0..3)
        .filter(|&i| masters.cmd_on::<i64>(i, &["PTTL", "legacy"]) as u128 > DELAY.as_millis())
        .count();
    assert!(kept >= 2, "kept past the lease on {kept} masters");
    let _granted = second
        .mutex_with("legacy", waiting())
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(before.elapsed() >= TTL + DELAY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_too_long_delays_are_refused() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for (ttl, delay) in [
        (TTL, Duration::ZERO),
        (Duration::from_secs(3600), Duration::from_secs(24 * 3600)),
    ] {
        let options = LockOptions::default().ttl(ttl).lock_delay(delay);
        let made = client.mutex_with("x", options);
        let Err(Error::InvalidArgument(said)) = made else {
            panic!("{delay:?} accepted: {made:?}");
        };
        assert!(said.contains("lock_delay"), "{said}");
    }
}

/// The delay after a crash, and a clean release freeing at once, on `holder`'s and
/// `other`'s deployment.
async fn delay_on(holder: Client, other: Client) {
    for kind in [Kind::Mutex, Kind::Fair, Kind::Permit] {
        let name = format!("legacy-{kind:?}");
        let after = granted_after_a_crash(&holder, &other, kind, &name, delayed()).await;
        assert!(
            after >= TTL + DELAY,
            "{kind:?}: granted {after:?} after the crash"
        );
        let clean = take(&holder, kind, &name, delayed(), true).await.unwrap();
        clean.unlock().await.unwrap();
    }
    let at_once = take(&other, Kind::Mutex, "legacy-Mutex", delayed(), true).await;
    assert!(at_once.is_ok(), "after a clean release: {at_once:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_and_through_sentinel_the_delay_holds_and_a_release_frees_at_once() {
    let cluster = RedisCluster::start(3, 0);
    let connect = || Client::cluster_builder(cluster.urls()).connect();
    delay_on(connect().await.unwrap(), connect().await.unwrap()).await;
    let group = MasterWithReplicas::start(1);
    let sentinels = SentinelGroup::start(group.master(), "locks", 3);
    let connect = || Client::sentinel_builder(sentinels.urls(), "locks").connect();
    delay_on(connect().await.unwrap(), connect().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_past_its_lease_but_within_the_delay_is_released_and_reported_lost() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // Also when it should be kept a while: a lapsed hold is not brought back.
    for (name, options) in [
        ("lapsed", delayed()),
        (
            "lapsed-kept",
            delayed().hold_at_least(Duration::from_secs(10)),
        ),
    ] {
        let guard = client
            .mutex_with(name, options)
            .unwrap()
            .lock()
            .await
            .unwrap();
        tokio::time::sleep(TTL + Duration::from_millis(400)).await;
        assert!(
            server.cmd::<i64>(&["PTTL", name]) > 0,
            "{name}: the delay keeps it"
        );
        let unlocked = guard.unlock().await;
        assert!(
            matches!(unlocked, Err(Error::Lost { .. })),
            "{name}: {unlocked:?}"
        );
        assert_eq!(
            server.cmd::<i64>(&["EXISTS", name]),
            0,
            "{name}: not given back"
        );
    }
}

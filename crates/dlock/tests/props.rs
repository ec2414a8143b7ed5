//! No input panics: arbitrary durations, names and URLs get a value or a typed error.

use std::time::Duration;

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::RedisServer;
use proptest::prelude::*;

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => Just(Duration::ZERO),
        1 => Just(Duration::MAX),
        8 => (10u64..5_000).prop_map(Duration::from_millis),
        1 => (0u64..100_000).prop_map(Duration::from_millis),
        1 => any::<u64>().prop_map(Duration::from_secs),
        1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_options() -> impl Strategy<Value = LockOptions> {
    (
        any_duration(),
        any_duration(),
        any_duration(),
        any_duration(),
        any_duration(),
        any_duration(),
        0u8..6,
        any::<bool>(),
    )
        .prop_map(|(ttl, lease, min, max, wait, cap, shape, odd_polling)| {
            let mut options = match shape % 3 {
                0 => LockOptions::default().ttl(ttl),
                1 => LockOptions::default().renewed(ttl),
                _ => LockOptions::default().renewed(ttl).max_hold(cap),
            };
            if odd_polling {
                options = options.waiter_lease(lease).backoff(min, max);
            }
            options.wait(match shape {
                0 | 3 => Wait::NoWait,
                1 | 4 => Wait::Timeout(wait),
                _ => Wait::Forever,
            })
        })
}

fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9:_-]{1,30}",
        2 => ".{0,40}",
        2 => "[a-z{}:]{0,12}",
        1 => Just(String::new()),
        1 => Just("x".repeat(dlock::MAX_NAME_LEN + 1)),
        1 => "\\PC{0,600}",
    ]
}

/// Locks made from arbitrary names and options either work or are refused with
/// `InvalidArgument`; a valid one can be taken and given back.
#[test]
fn names_and_options_never_panic() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(Client::connect(&server.url())).unwrap();
    let taken = std::cell::Cell::new(0);
    let config = ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    };
    let taken_count = &taken;
    proptest!(config, |(name in any_name(), options in any_options(), permits in 0u32..5)| {
        let made = client.mutex_with(&name, options);
        for other in [
            client.fair_mutex_with(&name, options).map(drop),
            client.reentrant_mutex_with(&name, options).map(drop),
            client.rwlock_with(&name, options).map(drop),
            client.semaphore_with(&name, permits, options).map(drop),
        ] {
            prop_assert!(matches!(other, Ok(()) | Err(Error::InvalidArgument(_))), "{other:?}");
        }
        match made {
            Err(Error::InvalidArgument(_)) => {}
            Err(other) => prop_assert!(false, "{other:?}"),
            Ok(mutex) => {
                let taken = runtime.block_on(async {
                    let guard = mutex.try_lock().await?;
                    guard.unlock().await
                });
                prop_assert!(matches!(taken, Ok(())), "{name:?}: {taken:?}");
                taken_count.set(taken_count.get() + 1);
            }
        }
    });
    assert!(
        taken.get() > 20,
        "only {} valid cases were taken",
        taken.get()
    );
}

fn any_url() -> impl Strategy<Value = String> {
    // Only loopback hosts: a generated host name must never send a DNS query.
    let host = prop_oneof![Just("127.0.0.1"), Just("localhost"), Just("[::1]")];
    let port = prop_oneof![
        Just(String::new()),
        any::<u32>().prop_map(|p| format!(":{p}"))
    ];
    let userinfo = prop_oneof![Just(String::new()), "[a-z:%@]{0,8}@".prop_map(String::from)];
    let tail = prop_oneof![
        Just(String::new()),
        "/[0-9a-z?=&%]{0,10}".prop_map(String::from)
    ];
    let scheme = prop_oneof![
        Just("redis://"),
        Just("rediss://"),
        Just("unix://"),
        Just("http://")
    ];
    prop_oneof![
        (scheme, userinfo, host, port, tail).prop_map(|(s, u, h, p, t)| format!("{s}{u}{h}{p}{t}")),
        // Not URLs at all (no scheme separator, so nothing is resolved).
        "[^:]{0,30}",
    ]
}

#[test]
fn urls_never_panic() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    };
    proptest!(config, |(url in any_url())| {
        let result = runtime.block_on(
            Client::builder(&url)
                .connect_timeout(Duration::from_millis(200))
                .response_timeout(Duration::from_millis(200))
                .connect(),
        );
        // Nothing listens on a random loopback port: any typed error will do.
        if let Ok(client) = result {
            runtime.block_on(client.shutdown());
        }
    });
}

//! The `metrics` feature's metrics, read the way an operator reads them: through the
//! Prometheus exporter's text format (as `examples/prometheus.rs` serves it).
//! Built only with `--features metrics` (scripts/test.sh runs it so).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dlock::{Client, LockOptions, LostReason, Wait};
use dlock_testkit::RedisServer;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's recorder (one per process: the tests of this file share it, so each
/// looks at its own kind or at changes).
fn exporter() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[0.001, 0.01, 0.1, 0.5, 1.0, 5.0])
            .unwrap()
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).unwrap();
        handle
    })
}

/// The value of the series `series` (name and labels as rendered), or 0 when absent.
fn value(series: &str) -> f64 {
    let text = exporter().render();
    text.lines()
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse::<f64>().unwrap())
        })
        .unwrap_or(0.0)
}

/// Waits (up to 10 s) until `series` reads `expected`.
async fn until_value(series: &str, expected: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(series) != expected {
        assert!(
            Instant::now() < deadline,
            "{series} is {} instead of {expected}:\n{}",
            value(series),
            exporter().render()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_counted_per_lock_and_holds_are_timed() {
    exporter();
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default().wait(Wait::Timeout(Duration::from_secs(30)));
    let mutex = client.mutex_with("m", options).unwrap();
    let other = client.mutex_with("other", options).unwrap();

    let holder = mutex.try_lock().await.unwrap();
    let other_holder = other.try_lock().await.unwrap();
    let held_from = Instant::now();
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let mutex = mutex.clone();
        waiters.push(tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            guard.unlock().await.unwrap();
        }));
        // One at a time, so each sees the waiters before it: 1, 2, 3 on "m".
        let waiting = waiters.len() as f64;
        until_value("dlock_waiters{kind=\"mutex\"}", waiting).await;
    }
    let on_other = tokio::spawn(async move { other.lock().await });
    until_value("dlock_waiters{kind=\"mutex\"}", 4.0).await;
    // Per lock: 1 + 2 + 3 on "m", then 1 on "other".
    assert_eq!(value("dlock_waiters_per_lock_count{kind=\"mutex\"}"), 4.0);
    assert_eq!(value("dlock_waiters_per_lock_sum{kind=\"mutex\"}"), 7.0);

    // A wait dropped (a timeout, select!) stops counting too.
    on_other.abort();
    until_value("dlock_waiters{kind=\"mutex\"}", 3.0).await;

    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.unlock().await.unwrap();
    let held_for = held_from.elapsed().as_secs_f64();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    until_value("dlock_waiters{kind=\"mutex\"}", 0.0).await;
    let series = "dlock_hold_seconds_count{kind=\"mutex\",outcome=\"released\"}";
    assert_eq!(value(series), 4.0, "the holder and three waiters");
    let sum = value("dlock_hold_seconds_sum{kind=\"mutex\",outcome=\"released\"}");
    assert!(
        sum >= 0.3 && sum < held_for + 5.0,
        "hold time {sum} s, the first holder held {held_for} s"
    );
    other_holder.unlock().await.unwrap();

    // A fair waiter handed the lock directly: its hold counts from the hand-off, not from
    // its queued attempt (from which its lease counts).
    let fair = client.fair_mutex_with("fair", options).unwrap();
    let first = fair.try_lock().await.unwrap();
    let first_from = Instant::now();
    let second = tokio::spawn({
        let fair = fair.clone();
        async move { fair.lock().await.unwrap().unlock().await.unwrap() }
    });
    until_value("dlock_waiters{kind=\"fair\"}", 1.0).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    first.unlock().await.unwrap();
    let first_held = first_from.elapsed().as_secs_f64();
    second.await.unwrap();
    let held = value("dlock_hold_seconds_sum{kind=\"fair\",outcome=\"released\"}");
    let holds = value("dlock_hold_seconds_count{kind=\"fair\",outcome=\"released\"}");
    assert_eq!(holds, 2.0);
    assert!(
        held < first_held + 0.4,
        "{held} s for a {first_held} s hold and one released at once: the second counted its wait"
    );

    // An unlock that finds the hold gone (an operator's forced release) is a lost hold.
    let forced = client.mutex_with("forced", options).unwrap();
    let guard = forced.try_lock().await.unwrap();
    client.force_release("forced").await.unwrap();
    assert!(matches!(
        guard.unlock().await,
        Err(dlock::Error::Lost { .. })
    ));
    let lost = value("dlock_hold_seconds_count{kind=\"mutex\",outcome=\"lost\"}");
    assert_eq!(lost, 1.0);
    // The metrics are described: a scrape has their help text.
    let text = exporter().render();
    for metric in [
        "dlock_hold_seconds",
        "dlock_waiters",
        "dlock_acquired_total",
    ] {
        assert!(
            text.lines()
                .any(|line| line.starts_with(&format!("# HELP {metric} "))),
            "no help for {metric} in:\n{text}"
        );
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_report_their_lag_and_margin_and_losses_their_delay() {
    exporter();
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();

    // Renewed every 300 ms; the server frozen for 400 ms after the first renewal: a later
    // one lands late, with less of the lease left.
    let renewed = client
        .semaphore_with(
            "renewed",
            2,
            LockOptions::default().renewed(Duration::from_millis(900)),
        )
        .unwrap();
    let guard = renewed.try_lock().await.unwrap();
    until_value("dlock_renew_lag_seconds_count", 1.0).await;
    server.pause();
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.resume();
    until_value("dlock_renew_lag_seconds_count", 3.0).await;
    guard.unlock().await.unwrap();
    let renewals = value("dlock_renew_lag_seconds_count");
    let on_time = value("dlock_renew_lag_seconds_bucket{le=\"0.01\"}");
    assert!(
        on_time < renewals,
        "the renewal held up by the frozen server shows its lag: {on_time} of {renewals} within 10 ms"
    );
    let margin = value("dlock_renew_margin_ratio_sum") / value("dlock_renew_margin_ratio_count");
    assert!(
        margin > 0.0 && margin < 0.95,
        "the share of the old lease left when renewals landed, not of the new one: {margin}"
    );

    // A lease that runs out: the lost signal, and a hold that ended at the loss, not at
    // the drop a second later.
    let expiring = client
        .rwlock_with(
            "expiring",
            LockOptions::default().ttl(Duration::from_millis(200)),
        )
        .unwrap();
    let guard = expiring.try_write().await.unwrap();
    assert_eq!(guard.lost().await, LostReason::Expired);
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(guard);
    let expired = "dlock_lost_signal_seconds_count{reason=\"expired\"}";
    assert_eq!(value(expired), 1.0);
    let delay = value("dlock_lost_signal_seconds_sum{reason=\"expired\"}");
    assert!(
        delay < 0.5,
        "woken {delay} s after the deadline: measured from the grant?"
    );
    let lost_hold = "dlock_hold_seconds_sum{kind=\"write\",outcome=\"lost\"}";
    assert!(
        value(lost_hold) > 0.0 && value(lost_hold) < 0.9,
        "a 200 ms lease lost, dropped after 1.2 s: {}",
        value(lost_hold)
    );
    // lost() called after the lease ran out reports a loss from before the call: no
    // latency is recorded for it.
    let late = expiring.try_write().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(late.lost().await, LostReason::Expired);
    assert_eq!(value(expired), 1.0);
    drop(late);

    // A hold taken away (an operator's forced release) is found by the next renewal.
    let taken = client
        .mutex_with(
            "taken",
            LockOptions::default().renewed(Duration::from_millis(300)),
        )
        .unwrap();
    let guard = taken.try_lock().await.unwrap();
    let taken_before = value("dlock_lost_total{reason=\"taken\"}");
    let lost = tokio::spawn({
        let mut signal = guard.lost_signal();
        async move { signal.wait().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.force_release("taken").await.unwrap();
    assert_eq!(lost.await.unwrap(), LostReason::Taken);
    assert_eq!(
        value("dlock_lost_signal_seconds_count{reason=\"taken\"}"),
        1.0
    );
    let taken_now = value("dlock_lost_total{reason=\"taken\"}");
    assert_eq!(taken_now - taken_before, 1.0);
    drop(guard);
    client.shutdown().await;
}

//! dlock's metrics (feature `metrics`) served to Prometheus: the `metrics` facade's
//! Prometheus exporter (crate `metrics-exporter-prometheus`) listens on an HTTP port, and a
//! few workers take turns on one lock so every metric has something to show.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --features metrics --example prometheus`, then
//! `curl http://127.0.0.1:9898/metrics` (`DLOCK_METRICS_ADDR` sets another address). It
//! runs for `DLOCK_SECONDS` seconds (default 30), then prints what a scrape would read.

use std::net::SocketAddr;
use std::time::Duration;

use dlock::{Client, LockOptions, Wait};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let addr: SocketAddr = std::env::var("DLOCK_METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9898".into())
        .parse()?;
    let seconds: u64 = std::env::var("DLOCK_SECONDS")
        .unwrap_or_else(|_| "30".into())
        .parse()?;

    // Histograms as Prometheus histograms (buckets), not summaries, so they aggregate
    // across processes: seconds from 1 ms to a minute for the durations, shares of a lease
    // for the renewal margin, counts for the waiters.
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[
            0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ])?
        .set_buckets_for_metric(
            Matcher::Full("dlock_renew_margin_ratio".into()),
            &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
        )?
        .set_buckets_for_metric(
            Matcher::Full("dlock_waiters_per_lock".into()),
            &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
        )?
        .build()?;
    // Kept to print the final scrape; the exporter serves HTTP on this runtime.
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    tokio::spawn(exporter);
    println!("serving metrics on http://{addr}/metrics for {seconds} s");

    let client = Client::connect(&url).await?;
    let options = LockOptions::default()
        .renewed(Duration::from_secs(3)) // renewed every second: the renewal metrics fill
        .wait(Wait::Timeout(Duration::from_secs(10)));
    let mutex = client.mutex_with("examples:prometheus", options)?;
    let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for worker in 0..4u64 {
        let mutex = mutex.clone();
        workers.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < until {
                match mutex.lock().await {
                    Ok(guard) => {
                        // Some holds outlast a renewal (a third of the lease).
                        let work = Duration::from_millis(50 + 600 * (worker % 3));
                        tokio::time::sleep(work).await;
                        let _ = guard.unlock().await;
                        // A pause between holds, as real work has: the others get turns.
                        tokio::time::sleep(Duration::from_millis(30)).await;
                    }
                    Err(err) => eprintln!("worker {worker}: {err}"),
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    client.shutdown().await;
    println!("{}", handle.render());
    Ok(())
}

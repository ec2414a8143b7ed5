//! The mutex: one holder at a time, a fencing token per grant, and the lost signal.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example mutex`

use std::time::Duration;

use dlock::{Client, Error, LockOptions, Wait};

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let options = LockOptions::default().wait(Wait::Timeout(Duration::from_secs(5)));
    let mutex = client.mutex_with("examples:mutex", options)?;

    let guard = mutex.lock().await?;
    let fence = guard.fence().await?;
    println!("holding {} with fencing token {fence}", guard.name());
    // A second attempt while held: busy (no waiting with try_lock).
    match mutex.try_lock().await {
        Err(Error::Busy { remaining, .. }) => {
            println!("a second holder is refused; lease left: {remaining:?}")
        }
        other => println!("unexpected: {other:?}"),
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(200)) => println!("work done"),
        reason = guard.lost() => println!("stopped: the lock was lost ({reason})"),
    }
    guard.unlock().await?;
    client.shutdown().await;
    Ok(())
}

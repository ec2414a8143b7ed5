//! Guarded writes: data beside the lock, written only while the hold is held.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example guarded`

use std::time::Duration;

use dlock::{Client, Error, Guarded, LockOptions, Wait};

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    // A short lease without renewal, so that a pause outlasts it.
    let short = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .wait(Wait::Timeout(Duration::from_secs(5)));
    let lock = client.mutex_with("examples:account", short)?;

    let paused = lock.lock().await?;
    paused.apply(&Guarded::new().set("balance", 100)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await; // a GC pause, say

    let next = lock.lock().await?;
    let replies = next.apply(&Guarded::new().incr_by("balance", -30)).await?;
    println!("the next holder took 30: {replies:?}");
    next.unlock().await?;

    match paused.apply(&Guarded::new().set("balance", 100)).await {
        Err(Error::Lost { .. }) => println!("the paused holder's late write was refused by Redis"),
        other => println!("unexpected: {other:?}"),
    }
    println!("the data key is {}", lock.data_key("balance"));
    client.shutdown().await;
    Ok(())
}

//! The fair mutex: waiters are served in arrival order, each handed the lock directly.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example fair_mutex`

use std::time::Duration;

use dlock::Client;

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let first = client.fair_mutex("examples:fair")?.lock().await?;
    let mut waiters = Vec::new();
    for n in 1..=4 {
        let lock = client.fair_mutex("examples:fair")?;
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            println!("waiter {n} holds it (fence {})", guard.fence().await?);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await
        }));
        // Arrive one after the other: they are served in this order.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.unlock().await?;
    for waiter in waiters {
        waiter.await.expect("the waiter task")?;
    }
    client.shutdown().await;
    Ok(())
}

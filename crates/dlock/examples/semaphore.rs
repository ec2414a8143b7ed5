//! The semaphore: at most N holders at once, each permit with its own lease and fence.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example semaphore`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::Client;

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let (busy, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let pool = client.semaphore("examples:gpu-pool", 3)?;
        let (busy, most) = (busy.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let permit = pool.lock().await?;
            let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            busy.fetch_sub(1, Ordering::SeqCst);
            permit.unlock().await
        }));
    }
    for worker in workers {
        worker.await.expect("the worker task")?;
    }
    println!(
        "8 workers, at most {} at once (N = 3)",
        most.load(Ordering::SeqCst)
    );
    client.shutdown().await;
    Ok(())
}

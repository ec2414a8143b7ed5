//! The read-write lock: readers share it, a writer has it alone, and a writer can turn
//! into a reader without a gap.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example rwlock`

use dlock::{Client, Error, Owner};

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let config = client.rwlock("examples:config")?;
    let a = config.for_owner(&Owner::new()).read().await?;
    let b = config.for_owner(&Owner::new()).read().await?;
    println!("readers at once: {}", config.readers().await?);
    println!(
        "a writer while they read: {}",
        if matches!(config.try_write().await, Err(Error::Busy { .. })) {
            "busy"
        } else {
            "?"
        }
    );
    a.unlock().await?;
    b.unlock().await?;
    let writer = config.write().await?;
    println!("writer holds it alone (fence {})", writer.fence().await?);
    let reader = writer.downgrade().await?; // now a read hold of the same owner
    println!("downgraded: {} reader", config.readers().await?);
    reader.unlock().await?;
    client.shutdown().await;
    Ok(())
}

//! Locks on a Redis Cluster (every kind works the same way; the mutex here): a lock's keys
//! share a hash slot, and waiters are woken over sharded pub/sub (Redis 7).
//!
//! Needs a cluster's nodes in `DLOCK_CLUSTER`, separated by commas (any of them; the
//! client learns the rest), e.g. `DLOCK_CLUSTER=redis://127.0.0.1:7000,redis://127.0.0.1:7001`.
//! Run: `cargo run -p dlock-redis --example cluster`

use dlock::Client;

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let seeds = std::env::var("DLOCK_CLUSTER").unwrap_or_else(|_| "redis://127.0.0.1:7000".into());
    let client = Client::cluster_builder(seeds.split(',')).connect().await?;
    for name in ["examples:a", "examples:b", "examples:c"] {
        let guard = client.mutex(name)?.lock().await?;
        println!("{name}: fence {}", guard.fence().await?);
        guard.unlock().await?;
    }
    client.shutdown().await;
    Ok(())
}

//! Locks on a master that Sentinels watch: the client asks the sentinels for the master,
//! and follows a failover. `LockOptions::replicas` makes each grant wait for replicas.
//!
//! Needs sentinels in `DLOCK_SENTINEL` (separated by commas) and the name they monitor the
//! master under in `DLOCK_SERVICE`, e.g. `DLOCK_SENTINEL=redis://127.0.0.1:26379
//! DLOCK_SERVICE=mymaster`.
//! Run: `cargo run -p dlock-redis --example sentinel`

use std::time::Duration;

use dlock::{Client, LockOptions};

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let sentinels =
        std::env::var("DLOCK_SENTINEL").unwrap_or_else(|_| "redis://127.0.0.1:26379".into());
    let service = std::env::var("DLOCK_SERVICE").unwrap_or_else(|_| "mymaster".into());
    let client = Client::sentinel_builder(sentinels.split(','), &service)
        .connect()
        .await?;
    // Granted only once one replica has the grant: a failover to that replica keeps it
    // (replica acknowledgement is not consensus; see docs/safety-model.md).
    let options = LockOptions::default().replicas(1, Duration::from_millis(500));
    let guard = client
        .mutex_with("examples:failover-safe", options)?
        .lock()
        .await?;
    println!(
        "held on the master of {service:?}; fence {}",
        guard.fence().await?
    );
    guard.unlock().await?;
    client.shutdown().await;
    Ok(())
}

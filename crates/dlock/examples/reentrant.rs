//! The reentrant mutex: one owner may enter again; the lock frees when the owner's last
//! hold is given back.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example reentrant`

use dlock::{Client, Error, Owner};

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let lock = client.reentrant_mutex("examples:reentrant")?;
    let owner = Owner::new();
    let outer = lock.for_owner(&owner).lock().await?;
    let inner = lock.for_owner(&owner).lock().await?; // the same owner enters again
    println!("entered {} times", inner.holds_at_grant());
    // Another owner is refused while any hold of the first remains.
    let other = lock.for_owner(&Owner::new()).try_lock().await;
    println!(
        "another owner: {}",
        matches!(other, Err(Error::Busy { .. }))
            .then_some("busy")
            .unwrap_or("?")
    );
    inner.unlock().await?;
    outer.unlock().await?;
    println!("holds left: {}", lock.for_owner(&owner).hold_count().await?);
    client.shutdown().await;
    Ok(())
}

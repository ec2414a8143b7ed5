//! Fenced writes to a SQL database (SQLite): a holder paused past its lease has its late
//! write refused by the table itself.
//!
//! Needs a Redis server: `DLOCK_REDIS` (default `redis://127.0.0.1:6379`), e.g. one
//! started with `redis-server --port 6379`. Run:
//!
//! ```sh
//! cargo run -p dlock-redis --example fenced_sqlite
//! ```
//!
//! Two holders of the lock `account:1` update the same row. The first pauses (a stand-in
//! for a GC pause, swap or SIGSTOP) past its 500 ms lease, which is not renewed; the second
//! takes the lock and writes; the first wakes and writes with its older fence, and the
//! `UPDATE ... WHERE last_fence <= fence` refuses it.

mod store;

use std::time::Duration;

use dlock::{Client, LockOptions, Wait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let db = rusqlite::Connection::open_in_memory()?;
    store::create(&db)?;

    // A fixed lease (no renewal), so a pause outlasts it as it would a stuck renewer.
    let short = LockOptions::default()
        .ttl(Duration::from_millis(500))
        .wait(Wait::Timeout(Duration::from_secs(5)));
    let lock = client.mutex_with("account:1", short.fence_at_grant())?;

    let paused = lock.lock().await?;
    let stale_fence = paused.fence().await?;
    println!("holder A holds account:1 with fence {stale_fence}; pauses for 800 ms");
    tokio::time::sleep(Duration::from_millis(800)).await;

    let next = lock.lock().await?;
    let fence = next.fence().await?;
    let accepted = store::set_balance(&db, 1, 70, fence)?;
    println!("holder B (fence {fence}) sets the balance to 70: accepted {accepted}");
    next.unlock().await?;

    let late = store::set_balance(&db, 1, 100, stale_fence)?;
    println!(
        "holder A wakes and sets the balance to 100 with fence {stale_fence}: accepted {late}"
    );
    let (balance, last_fence) = store::account(&db, 1)?.expect("the row exists");
    println!("balance {balance}, last fence {last_fence}");
    assert!(!late && balance == 70, "the stale write must be refused");
    // A's guard knows it is gone: its unlock reports the loss.
    println!("holder A's unlock: {:?}", paused.unlock().await.err());
    client.shutdown().await;
    Ok(())
}

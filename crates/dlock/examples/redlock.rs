//! Redlock: a mutex granted by a majority of independent masters.
//!
//! Needs independent Redis masters in `DLOCK_REDLOCK`, separated by commas, e.g. three
//! started with `redis-server --port 7001`, `--port 7002`, `--port 7003` and
//! `DLOCK_REDLOCK=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003`.
//! Run: `cargo run -p dlock-redis --example redlock`

use dlock::Client;

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let masters = std::env::var("DLOCK_REDLOCK").unwrap_or_else(|_| {
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".into()
    });
    let redlock = Client::redlock(masters.split(',')).await?;
    let guard = redlock.mutex("examples:redlock")?.lock().await?;
    println!("granted by a majority; fence {}", guard.fence().await?);
    guard.unlock().await?;
    redlock.shutdown().await;
    Ok(())
}

//! The blocking API: the same locks for programs without an async runtime.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example blocking`

fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = dlock::blocking::Client::connect(&url)?;
    let guard = client.mutex("examples:nightly-report")?.lock()?;
    println!("holding it with fence {}", guard.fence()?);
    if guard.lost().is_none() {
        println!("still held: working");
    }
    guard.unlock()?;
    client.shutdown();
    Ok(())
}

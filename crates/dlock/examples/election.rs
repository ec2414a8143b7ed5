//! Leader election: candidates take turns leading, each with a larger term; an observer
//! sees every change.
//!
//! Needs a Redis server at `DLOCK_REDIS` (default `redis://127.0.0.1:6379`).
//! Run: `cargo run -p dlock-redis --example election`

use dlock::Client;

#[tokio::main]
async fn main() -> dlock::Result<()> {
    let url = std::env::var("DLOCK_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let election = client.election("examples:scheduler")?;
    let mut observer = election.observe();
    println!("leader now: {:?}", observer.next().await?);
    for candidate in ["host-a:8080", "host-b:8080"] {
        let leading = election.campaign(candidate).await?;
        println!("{candidate} leads in term {}", leading.term());
        println!("observed: {:?}", observer.next().await?);
        leading.resign().await?;
        println!("observed: {:?}", observer.next().await?);
    }
    client.shutdown().await;
    Ok(())
}

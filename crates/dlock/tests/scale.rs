//! Scale: what one operation costs the server must not grow with the number of holders
//! (read holds, semaphore permits).

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::Held;
use dlock::{Client, LockOptions};
use dlock_testkit::RedisServer;

/// Live holds beside the ones that expire.
const LIVE: usize = 1000;
/// Holds whose lease ends before the measured operation.
const EXPIRED: usize = 10;

/// Commands that read every field of a hash: an operation that runs one is O(holders).
const WHOLE_HASH_READS: [&str; 5] = ["hgetall", "hkeys", "hvals", "hscan", "hlen"];
/// Commands that read or write single fields of a hash.
const FIELD_COMMANDS: [&str; 6] = ["hget", "hexists", "hdel", "hset", "hsetnx", "hincrby"];

/// Takes one more read hold (a fresh owner) or permit of `name` on a lease of `ttl`.
async fn hold(client: &Client, read: bool, name: &str, ttl: Duration) -> Held {
    let options = LockOptions::default().ttl(ttl);
    if read {
        Held::Read(
            client
                .rwlock_with(name, options)
                .unwrap()
                .try_read()
                .await
                .unwrap(),
        )
    } else {
        Held::Permit(
            client
                .semaphore_with(name, 2 * LIVE as u32, options)
                .unwrap()
                .try_lock()
                .await
                .unwrap(),
        )
    }
}

/// How often the server ran each of `commands` (from `INFO commandstats`).
fn calls_of(stats: &HashMap<String, u64>, commands: &[&str]) -> u64 {
    commands
        .iter()
        .map(|command| stats.get(*command).copied().unwrap_or(0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purging_expired_holds_among_a_thousand_live_ones_touches_only_the_expired() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for read in [true, false] {
        let name = if read { "fleet-config" } else { "pool" };
        let mut live = Vec::new();
        for _ in 0..LIVE {
            live.push(hold(&client, read, name, Duration::from_secs(120)).await);
        }
        let mut short = Vec::new();
        for _ in 0..EXPIRED {
            short.push(hold(&client, read, name, Duration::from_millis(200)).await);
        }
        tokio::time::sleep(Duration::from_millis(400)).await;

        let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
        let one_more = hold(&client, read, name, Duration::from_secs(120)).await;
        let stats = server.command_calls();

        assert_eq!(
            calls_of(&stats, &WHOLE_HASH_READS),
            0,
            "read={read}: an acquire read every holder: {stats:?}"
        );
        // Per expired hold: its field read and deleted (and for a reader, its owner's
        // count and fence); plus the few fields of the new hold.
        let field_calls = calls_of(&stats, &FIELD_COMMANDS);
        assert!(
            field_calls <= (4 * EXPIRED + 10) as u64,
            "read={read}: {field_calls} hash field commands for {EXPIRED} expired holds: {stats:?}"
        );
        // ... and it did purge them, leaving every live one.
        for gone in &short {
            let field = format!("h:{}", gone.token());
            let present: i64 = server.cmd(&["HEXISTS", name, &field]);
            assert_eq!(present, 0, "read={read}: an expired hold was kept");
        }
        let indexed: i64 = server.cmd(&["ZCARD", &format!("{{{name}}}:expiry")]);
        assert_eq!(
            indexed as usize,
            LIVE + 1,
            "read={read}: live holds indexed"
        );
        let holders = client.inspect(name).await.unwrap().holders.len();
        assert_eq!(holders, LIVE + 1, "read={read}: every live hold kept");

        // Negative control: the measure sees an operation that does read every holder
        // (inspect lists them all).
        let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
        client.inspect(name).await.unwrap();
        assert!(
            calls_of(&server.command_calls(), &WHOLE_HASH_READS) > 0,
            "the check cannot see a whole-hash read"
        );

        one_more.unlock().await.unwrap();
        for held in live {
            held.unlock().await.unwrap();
        }
        let left: i64 = server.cmd(&["EXISTS", name, &format!("{{{name}}}:expiry")]);
        assert_eq!(left, 0, "read={read}: nothing left once every hold is back");
    }
}

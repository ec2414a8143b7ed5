//! The fencing promise end to end: a holder that pauses past its lease (a GC pause, swap,
//! SIGSTOP) and then writes is rejected by storage that checks fencing tokens. The same
//! scenario against storage that ignores them is the negative control: the stale write
//! overwrites the newer holder's.

use std::time::Duration;

use dlock::{Client, LockOptions, LostReason, Wait};
use dlock_testkit::RedisServer;

/// Storage that remembers the largest fencing token it has seen and refuses older ones.
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= seen then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1";

async fn write(
    storage: &mut redis::aio::MultiplexedConnection,
    fenced: bool,
    fence: u64,
    value: &str,
) -> bool {
    if fenced {
        let accepted: i64 = redis::Script::new(FENCED_WRITE)
            .key("record")
            .arg(fence)
            .arg(value)
            .invoke_async(storage)
            .await
            .unwrap();
        accepted == 1
    } else {
        let _: () = redis::cmd("HSET")
            .arg("record")
            .arg("value")
            .arg(value)
            .query_async(storage)
            .await
            .unwrap();
        true
    }
}

/// Returns (whether the paused holder's write was accepted, the final stored value).
async fn paused_holder_scenario(fenced: bool) -> (bool, String) {
    let locks = RedisServer::start();
    let storage_server = RedisServer::start();
    let mut storage = redis::Client::open(storage_server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let client = Client::connect(&locks.url()).await.unwrap();
    let short = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .wait(Wait::Timeout(Duration::from_secs(5)));

    let paused = client
        .mutex_with("record-lock", short)
        .unwrap()
        .lock()
        .await
        .unwrap();
    // It reads its fencing token as it starts working (a plain mutex draws it then).
    let paused_fence = paused.fence().await.unwrap();
    // The holder stalls past its lease; its lost signal fires, but a paused process
    // cannot act on it.
    let reason = tokio::time::timeout(Duration::from_secs(5), paused.lost())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::Expired);

    let next = client
        .mutex_with("record-lock", short)
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(next.fence().await.unwrap() > paused_fence);
    assert!(
        write(
            &mut storage,
            fenced,
            next.fence().await.unwrap(),
            "from the current holder"
        )
        .await
    );
    next.unlock().await.unwrap();

    // The paused holder wakes up and writes with its old fencing token.
    let stale_accepted = write(&mut storage, fenced, paused_fence, "stale write").await;
    let value: String = redis::cmd("HGET")
        .arg("record")
        .arg("value")
        .query_async(&mut storage)
        .await
        .unwrap();
    (stale_accepted, value)
}

#[tokio::test]
async fn fenced_storage_rejects_a_holder_that_paused_past_its_lease() {
    let (stale_accepted, value) = paused_holder_scenario(true).await;
    assert!(!stale_accepted, "the stale write was rejected");
    assert_eq!(value, "from the current holder");
}

#[tokio::test]
async fn negative_control_unfenced_storage_takes_the_stale_write() {
    let (stale_accepted, value) = paused_holder_scenario(false).await;
    assert!(stale_accepted);
    assert_eq!(
        value, "stale write",
        "without fencing the paused holder overwrote newer data"
    );
}

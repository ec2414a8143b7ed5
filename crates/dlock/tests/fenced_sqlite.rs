//! Fenced resources made easy, for SQL: the table of `examples/fenced_sqlite` refuses a
//! paused holder's late write (its fence is older than its successor's), and accepts the
//! same hold's repeated writes. The negative control writes the same rows without the
//! fence check, and the paused holder's write overwrites its successor's.

#[path = "../examples/fenced_sqlite/store.rs"]
mod store;

use std::time::Duration;

use dlock::{Client, LockOptions, Wait};
use dlock_testkit::RedisServer;

/// A holder pauses past its (unrenewed) lease; the next holder writes; the paused one
/// wakes and writes. Returns whether its late write was accepted, and the final balance.
async fn paused_holder(fenced: bool) -> (bool, i64) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let db = rusqlite::Connection::open_in_memory().unwrap();
    store::create(&db).unwrap();
    let write = |balance: i64, fence: u64| match fenced {
        true => store::set_balance(&db, 1, balance, fence).unwrap(),
        false => {
            db.execute(
                "INSERT INTO accounts (id, balance) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET balance = excluded.balance",
                [balance],
            )
            .unwrap();
            true
        }
    };
    let short = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .wait(Wait::Timeout(Duration::from_secs(5)))
        .fence_at_grant();
    let lock = client.mutex_with("account:1", short).unwrap();

    let paused = lock.lock().await.unwrap();
    let stale = paused.fence().await.unwrap();
    assert!(write(10, stale), "the first write of a hold is accepted");
    assert!(
        write(20, stale),
        "the same hold writes again with the same fence"
    );
    tokio::time::sleep(Duration::from_millis(500)).await; // the pause

    let next = lock.lock().await.unwrap();
    let fence = next.fence().await.unwrap();
    assert!(fence > stale);
    assert!(write(70, fence));
    next.unlock().await.unwrap();

    let late = write(100, stale);
    let (balance, _) = store::account(&db, 1).unwrap().unwrap();
    (late, balance)
}

#[tokio::test]
async fn a_paused_holders_late_sql_write_is_refused_by_the_table() {
    let (late_accepted, balance) = paused_holder(true).await;
    assert!(!late_accepted);
    assert_eq!(balance, 70, "the successor's write stands");
    let db = rusqlite::Connection::open_in_memory().unwrap();
    store::create(&db).unwrap();
    assert!(store::set_balance(&db, 2, 5, 9).unwrap());
    assert_eq!(store::account(&db, 2).unwrap(), Some((5, 9)));
}

#[tokio::test]
async fn negative_control_an_unfenced_table_takes_the_late_write() {
    let (late_accepted, balance) = paused_holder(false).await;
    assert!(late_accepted);
    assert_eq!(
        balance, 100,
        "the check must be able to see a late write land"
    );
}

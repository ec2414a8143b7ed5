//! The test door `dlock::__scripts`: a call composed there is the call the library makes,
//! so a hold taken through it is one the library's own handles see, and the other way
//! round.

use dlock::__scripts::{
    AcquireReply, HoldKind, LibraryCall, LockKeys, MutexAcquire, MutexRelease, Renew, Renewal,
};
use dlock::{Client, Error};
use dlock_testkit::RedisServer;

mod common;

#[tokio::test]
async fn a_hold_taken_through_the_door_is_the_librarys_hold() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex("door").unwrap();
    let keys = LockKeys::new("", "door").unwrap();
    let mut conn = server.connection();

    let acquire = MutexAcquire {
        keys: &keys,
        token: "door-token",
        lease_ms: 10_000,
        eager: true,
        tell_clock: false,
    }
    .composed();
    assert_eq!(acquire.name, "mutex acquire");
    // A grant with its fence answers the bare fence, read as [1, fence].
    let granted: AcquireReply = acquire.run_blocking(&mut conn).unwrap();
    assert!(
        matches!(granted[..], [1, fence] if fence > 0),
        "{granted:?}"
    );
    assert!(matches!(mutex.try_lock().await, Err(Error::Busy { .. })));

    let release = MutexRelease {
        keys: &keys,
        token: "door-token",
    }
    .composed();
    assert_eq!(release.run_blocking::<i64>(&mut conn).unwrap(), 1);
    let guard = mutex.try_lock().await.unwrap();

    // The library's hold, renewed through the door on an async connection.
    let hold = [Renewal {
        key: &keys.key,
        kind: HoldKind::String,
        token: guard.token(),
        lease_ms: 20_000,
    }];
    let mut raw = common::raw_conn(&server).await;
    let renewed: Vec<i64> = Renew { holds: &hold }
        .composed()
        .run(&mut raw)
        .await
        .unwrap();
    assert_eq!(renewed, [1]);
    // The same call as one EVAL (it changes nothing more: the lease restarts again).
    let again: Vec<i64> = Renew { holds: &hold }
        .composed()
        .eval()
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(again, [1]);
    guard.unlock().await.unwrap();
}

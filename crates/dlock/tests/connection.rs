//! Connection options against real redis-servers: TLS, ACL users, db numbers.

use std::time::Duration;

use dlock::{Client, Error, LockOptions, Wait};
use dlock_testkit::{RedisServer, ServerOptions};

#[tokio::test]
async fn tls_with_a_trusted_ca_carries_locks_and_notifications() {
    let server = RedisServer::start_with(ServerOptions::tls());
    assert!(server.url().starts_with("rediss://"));
    let client = Client::builder(&server.url())
        .tls_root_certificate(server.ca_pem())
        .connect()
        .await
        .unwrap();
    let holder = client
        .mutex_with("job", LockOptions::default().wait(Wait::NoWait))
        .unwrap();
    let guard = holder.try_lock().await.unwrap();
    // A waiter woken by the release: the subscriber connection is TLS too.
    let waiter = client
        .mutex_with(
            "job",
            LockOptions::default()
                .wait(Wait::Timeout(Duration::from_secs(10)))
                .backoff(Duration::from_secs(20), Duration::from_secs(20)),
        )
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();
    waiting.await.unwrap().unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn tls_with_an_untrusted_certificate_is_a_misconfiguration() {
    let server = RedisServer::start_with(ServerOptions::tls());
    let result = Client::builder(&server.url())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await;
    // Retrying cannot help: the CA setting must change.
    match result {
        Err(error @ Error::Misconfigured(_)) => {
            assert!(!error.is_transient());
            assert!(error.to_string().contains("TLS"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn acl_users_and_db_numbers_in_the_url() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all",
    ]);
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "reader", "on", ">s3cret", "~*", "&*", "+@read",
    ]);
    let base = format!("redis://locker:s3cret@127.0.0.1:{}/3", server.port());
    let client = Client::connect(&base).await.unwrap();
    let guard = client.mutex("job").unwrap().try_lock().await.unwrap();
    let mut db3 = server.connection();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut db3).unwrap();
    let stored: String = redis::cmd("GET").arg("job").query(&mut db3).unwrap();
    assert_eq!(stored, guard.token(), "the lock lives in db 3");
    guard.unlock().await.unwrap();

    let wrong = format!("redis://locker:wrong@127.0.0.1:{}", server.port());
    let refused = Client::connect(&wrong).await;
    assert!(
        matches!(&refused, Err(e @ Error::Authentication(_)) if !e.is_transient()),
        "{refused:?}"
    );

    // A user without script permissions is refused by Redis: not a connection problem.
    let limited = format!("redis://reader:s3cret@127.0.0.1:{}", server.port());
    let client = Client::connect(&limited).await.unwrap();
    let result = client.mutex("job").unwrap().try_lock().await;
    match result {
        Err(Error::Refused { reason, .. }) => assert!(reason.starts_with("NOPERM"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// A port where something else answers (an HTTP server) is a misconfiguration, named as
/// such, not a connection worth retrying.
#[tokio::test]
async fn a_peer_that_does_not_speak_redis_is_a_misconfiguration() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut request = [0u8; 512];
                while let Ok(read) = stream.read(&mut request).await {
                    if read == 0 {
                        return;
                    }
                    let answer = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let result = Client::builder(&format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await;
    match result {
        Err(error @ Error::Misconfigured(_)) => {
            assert!(!error.is_transient());
            assert!(error.to_string().contains("Redis protocol"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    http.abort();
}

/// `Client::connection()` is a connection of its own: a blocking command there does not
/// hold up the locks' requests (on the shared multiplexed connection they would queue
/// behind it until it returned).
#[tokio::test]
async fn a_blocking_command_on_the_raw_connection_does_not_stall_the_locks() {
    let server = dlock_testkit::RedisServer::start();
    let client = dlock::Client::connect(&server.url()).await.unwrap();
    let mut conn = client.connection().await.unwrap();
    let blocked = tokio::spawn(async move {
        let popped: Option<(String, String)> = redis::cmd("BLPOP")
            .arg("nothing-comes")
            .arg(5)
            .query_async(&mut conn)
            .await
            .unwrap();
        popped
    });
    // Until the server has the BLPOP, the check below would prove nothing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server
        .cmd::<String>(&["INFO", "clients"])
        .contains("blocked_clients:0")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the BLPOP never blocked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mutex = client.mutex("beside").unwrap();
    for _ in 0..5 {
        mutex.try_lock().await.unwrap().unlock().await.unwrap();
    }
    assert!(
        !blocked.is_finished(),
        "the lock requests waited for the BLPOP: they share its connection"
    );
    blocked.abort();
    client.shutdown().await;
}

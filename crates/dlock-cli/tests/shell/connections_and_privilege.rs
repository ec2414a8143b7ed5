//! Arguments checked before connecting, a Redis gone away, passwords never shown, the
//! least-privilege ACL line of docs/operations.md, the scripts wherever cargo builds, and an evicting
//! memory policy warned about.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, output};

#[test]
fn arguments_are_checked_before_connecting_and_durations_read_humanely() {
    // Nothing listens on this port: a usage error must not wait for a connection.
    let unreachable = "redis://127.0.0.1:1";
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dlock"))
            .env("DLOCK_REDIS", unreachable)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for args in [
        &["run", "", "--", "true"][..],
        &["acquire", "x", "--ttl", "0s"],
        &[
            "acquire",
            "x",
            "--ttl",
            "10000000000000000000s10000000000000000000s",
        ],
        &["acquire", "x", "--wait", "100000000h"],
        &[
            "run",
            "x",
            "--ttl",
            "2s",
            "--kill-after",
            "5s",
            "--",
            "true",
        ],
        &["acquire", "x", "--permits", "0"],
        &["acquire", "x", "--permits", "99999999999"],
        &["acquire", "x", "--fair", "--waiter-lease", "50ms"],
        &["bench", "--duration", "0s"],
        &["inspect", "a}b"],
    ] {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("Wait::Forever"), "{stderr}");
    }
    let wait = String::from_utf8(run(&["acquire", "x", "--wait", "100000000h"]).stderr).unwrap();
    assert!(wait.contains("leave out --wait"), "{wait}");
    let ttl = String::from_utf8(run(&["acquire", "x", "--ttl", "25h"]).stderr).unwrap();
    assert!(ttl.contains("25h") && ttl.contains("24h"), "{ttl}");
    let help = crate::common::flat(&String::from_utf8(run(&["run", "--help"]).stdout).unwrap());
    for needle in [
        "DLOCK_NAME",
        "DLOCK_TOKEN",
        "DLOCK_FENCE",
        "renewed",
        "126",
        "127",
        "--kill-after",
        "10ms to 24h",
    ] {
        assert!(help.contains(needle), "run --help lacks {needle}");
    }
}

#[test]
fn waiting_forever_on_a_redis_that_went_away_says_it_is_retrying() {
    let mut server = RedisServer::start();
    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--ttl", "2s"])),
        0
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let mut waiter = dlock(&server)
        .args(["acquire", "job"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server.kill9();
    // Said once the waiter next tries (the holder's lease, or the lost subscription,
    // wakes it); a loaded machine may take a while.
    let mut said = String::new();
    for _ in 0..300 {
        said = std::fs::read_to_string(&log).unwrap();
        if said.contains("retrying") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(said.contains("retrying"), "{said}");
    server.restart();
    let status = waiter.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let mut token = String::new();
    waiter
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut token)
        .unwrap();
    assert!(!token.is_empty());
}

#[test]
fn passwords_never_appear_in_messages_or_logs() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">right-secret",
        "~*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://app:wrong-secret@127.0.0.1:{}", server.port());
    let out = output(dlock(&server).args(["-vv", "--redis", &url, "acquire", "job"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76));
    assert!(!stderr.contains("wrong-secret"), "{stderr}");
    let url = format!("redis://app:right-secret@127.0.0.1:{}", server.port());
    let out = output(dlock(&server).args(["-vv", "--redis", &url, "run", "job", "--", "true"]));
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("right-secret"));
}

/// The one `ACL SETUSER` line of docs/operations.md ("Least privilege"), for prefix `myapp:` and the given password.
fn documented_acl_line(password: &str) -> Vec<String> {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/operations.md"
    ))
    .unwrap();
    let line = page
        .lines()
        .find(|l| l.starts_with("redis-cli ACL SETUSER dlock "))
        .expect("docs/operations.md has the ACL line");
    // Undo the shell quoting of the documented command line.
    line.split_whitespace()
        .skip(1)
        .map(|word| {
            word.trim_matches('\'')
                .replace('\\', "")
                .replace("PASSWORD", password)
        })
        .collect()
}

#[test]
fn the_documented_acl_line_is_enough_for_every_primitive_and_nothing_more() {
    let server = RedisServer::start();
    let words = documented_acl_line("pw");
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    let _: () = server.cmd(&args);
    let url = format!("redis://dlock:pw@127.0.0.1:{}", server.port());
    let as_user = |args: &[&str]| {
        let mut command = dlock(&server);
        command
            .env("DLOCK_REDIS", &url)
            .env("DLOCK_PREFIX", "myapp:")
            .args(args);
        command
    };
    // Every kind through the CLI, with waiting (notifications) and release.
    for kind in [
        &[][..],
        &["--fair"],
        &["--read"],
        &["--write"],
        &["--permits", "2"],
    ] {
        let mut hold = vec!["acquire", "job", "--ttl", "1s"];
        hold.extend_from_slice(kind);
        let out = output(&mut as_user(&hold));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{kind:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = String::from_utf8(out.stdout).unwrap();
        let token = token.split_whitespace().next().unwrap().to_string();
        let mut extend = vec!["extend", "job", &token, "--ttl", "2s"];
        extend.extend_from_slice(kind);
        assert_eq!(code(&mut as_user(&extend)), 0, "{kind:?}");
        let mut release = vec!["release", "job", &token];
        release.extend_from_slice(kind);
        assert_eq!(code(&mut as_user(&release)), 0, "{kind:?}");
        let mut run = vec!["run", "job", "--ttl", "1s"];
        run.extend_from_slice(kind);
        run.extend_from_slice(&["--", "true"]);
        let out = output(&mut as_user(&run));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{kind:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A waiter woken by a release (subscribe permission on the channels).
    let holder = output(&mut as_user(&["acquire", "wake", "--ttl", "30s"]));
    let token = String::from_utf8(holder.stdout).unwrap();
    let token = token.split_whitespace().next().unwrap().to_string();
    let waiter = as_user(&["run", "wake", "--wait", "20s", "--", "true"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    assert_eq!(code(&mut as_user(&["release", "wake", &token])), 0);
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "woken by the release"
    );
    assert_eq!(code(&mut as_user(&["inspect", "--match", "*"])), 0);
    assert_eq!(code(&mut as_user(&["release", "--force", "job"])), 0);
    // What the CLI cannot reach, through the library as the same user: the reentrant
    // mutex, downgrade, inspection.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = dlock::Client::builder(&url)
            .prefix("myapp:")
            .connect()
            .await
            .unwrap();
        let owner = dlock::Owner::new();
        let ledger = client.reentrant_mutex("ledger").unwrap();
        let outer = ledger.for_owner(&owner).lock().await.unwrap();
        let inner = ledger.for_owner(&owner).lock().await.unwrap();
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
        let config = client.rwlock("config").unwrap();
        let read = config.write().await.unwrap().downgrade().await.unwrap();
        assert_eq!(client.inspect("config").await.unwrap().holders.len(), 1);
        read.unlock().await.unwrap();
        client.shutdown().await;
    });
    // Outside the prefix: refused by Redis, exit 76.
    let out = output(as_user(&["acquire", "job"]).env("DLOCK_PREFIX", "other:"));
    assert_eq!(
        out.status.code(),
        Some(76),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOPERM"));
}

#[test]
fn demo_and_bench_work_wherever_cargo_builds_and_never_adopt_a_foreign_server() {
    // A redis-server that is not ours, on the first port the scripts try (if it is free).
    let foreign = Command::new(dlock_testkit::redis_server_binary())
        .args([
            "--port",
            "16379",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--daemonize",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    std::thread::sleep(Duration::from_millis(300));
    // Only a server this test started is checked afterwards (if the port was taken, ours
    // exited at once; whatever holds the port is not ours to inspect).
    // Killed however the test ends: a failed assertion must not leave it running.
    let foreign = foreign.ok().and_then(|mut child| match child.try_wait() {
        Ok(None) => Some(dlock_testkit::KillOnDrop(child)),
        _ => None,
    });
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // A target directory of its own: the scripts must not assume ./target.
    let exe = Path::new(env!("CARGO_BIN_EXE_dlock"));
    let target = exe.parent().unwrap().parent().unwrap().join("scripts-test");
    let run = |script: &str, args: &[&str]| {
        Command::new(format!("{root}/scripts/{script}"))
            .args(args)
            .env("CARGO_TARGET_DIR", &target)
            // What the scripts do is tested here, not how fast the binary is: unoptimised,
            // their release build takes less than half the time (92 s against 238 s on 2
            // busy cores), and this test is the suite's longest.
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env_remove("DLOCK_REDIS")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let demo = run("demo.sh", &[]);
    let said = String::from_utf8_lossy(&demo.stdout);
    assert_eq!(
        demo.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    assert!(said.contains("final counter: 20 (expected 20)"), "{said}");
    let bench = run(
        "bench.sh",
        &[
            "--duration",
            "100ms",
            "--renew-locks",
            "50",
            "--capacity-locks",
            "50",
            "--capacity-ttl",
            "3s",
            "--json",
        ],
    );
    assert_eq!(
        bench.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&bench.stderr)
    );
    if let Some(foreign) = foreign {
        let written: redis::RedisResult<i64> = redis::Client::open("redis://127.0.0.1:16379")
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("DBSIZE").query(&mut c));
        drop(foreign);
        if let Ok(keys) = written {
            assert_eq!(
                keys, 0,
                "the scripts wrote into a server that was not theirs"
            );
        }
    }
}

#[test]
fn an_evicting_memory_policy_is_warned_about_at_connect() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let out = output(dlock(&server).args(["run", "job", "--", "true"]));
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("maxmemory-policy"), "{stderr}");
    // Control: with noeviction nothing is said.
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let out = output(dlock(&server).args(["run", "job", "--", "true"]));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! `dlock run NAME --also NAME2 -- CMD`: one hold over several names. The dining
//! philosophers (five processes in a ring, each holding its two neighbouring forks for
//! several rounds) never overlap on a fork and never wait a lease; the negative control
//! takes two forks one by one in opposite orders with plain `dlock acquire` and
//! deadlocks until a lease ends. Also DLOCK_FENCES, exclusion of the names' other
//! holders, and the usage errors.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

mod common;
use common::{code, dlock, output};

/// A lease no test outlives: a wait this long is a deadlock resolved by expiry.
const TTL: &str = "20s";

#[test]
fn dlock_fences_names_every_fence_and_every_name_is_held() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fences");
    let script = format!(
        "echo \"$DLOCK_FENCE|$DLOCK_FENCES\" > {}; dlock acquire b -n; echo $? >> {}",
        file.display(),
        file.display()
    );
    let ran = output(
        dlock(&server)
            .args([
                "run", "a", "--also", "b", "--also", "c", "--", "sh", "-c", &script,
            ])
            .env("PATH", path_with_dlock()),
    );
    assert!(ran.status.success(), "{ran:?}");
    let written = std::fs::read_to_string(&file).unwrap();
    let mut lines = written.lines();
    let (first, all) = lines.next().unwrap().split_once('|').unwrap();
    let pairs: Vec<(&str, &str)> = all.split(' ').map(|p| p.split_once('=').unwrap()).collect();
    let names: Vec<&str> = pairs.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(pairs[0].1, first, "DLOCK_FENCE is the first name's");
    for (name, fence) in &pairs {
        let counter: String = server.cmd(&["GET", &format!("{{{name}}}:fence")]);
        assert_eq!(*fence, counter, "{name}'s own counter");
    }
    // A mutex of a held name was busy (75) while the command ran.
    assert_eq!(lines.next(), Some("75"));
    for name in ["a", "b", "c"] {
        assert!(!server.cmd::<bool>(&["EXISTS", name]), "{name} released");
    }
}

/// PATH with the directory of the `dlock` under test first.
fn path_with_dlock() -> String {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_dlock"));
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn usage_errors_exit_64() {
    let server = RedisServer::start();
    for args in [
        &["run", "a", "--also", "a", "--", "true"][..],
        &["run", "a", "--also", "b", "--read", "--", "true"],
        &["run", "a", "--also", "b", "--permits", "3", "--", "true"],
        &[
            "run",
            "a",
            "--also",
            "b",
            "--skip-if-ran-within",
            "1m",
            "--",
            "true",
        ],
        &["acquire", "a", "--also", "b"],
    ] {
        assert_eq!(code(dlock(&server).args(args)), 64, "{args:?}");
    }
    // Redlock: refused before connecting (nothing listens on these ports).
    let redlock = output(
        dlock(&server)
            .env_remove("DLOCK_REDIS")
            .args([
                "--redis",
                "redis://127.0.0.1:1",
                "--redis",
                "redis://127.0.0.1:2",
            ])
            .args([
                "--redis",
                "redis://127.0.0.1:3",
                "run",
                "a",
                "--also",
                "b",
                "--",
                "true",
            ]),
    );
    assert_eq!(redlock.status.code(), Some(64), "{redlock:?}");
    assert!(String::from_utf8_lossy(&redlock.stderr)
        .contains("--also cannot be used with several --redis"));
}

/// Each philosopher's hold windows, in nanoseconds of the shared clock.
fn windows(file: &std::path::Path) -> Vec<(u128, u128)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (start, end) = line.split_once(' ').unwrap();
            (start.parse().unwrap(), end.parse().unwrap())
        })
        .collect()
}

#[test]
fn dining_philosophers_never_share_a_fork_and_never_wait_a_lease() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    const SEATS: usize = 5;
    const ROUNDS: usize = 6;
    let started = Instant::now();
    let philosophers: Vec<Child> = (0..SEATS)
        .map(|i| {
            let (left, right) = (format!("fork-{i}"), format!("fork-{}", (i + 1) % SEATS));
            let out = dir.path().join(format!("seat-{i}"));
            // Each round: take both forks, note the window, eat a little, give them back.
            let eat = format!(
                "s=$(date +%s%N); sleep 0.05; echo \"$s $(date +%s%N)\" >> {}",
                out.display()
            );
            let rounds = format!(
                "for r in $(seq {ROUNDS}); do dlock run {left} --also {right} --ttl {TTL} -- sh -c '{eat}' || exit 1; done"
            );
            Command::new("sh")
                .args(["-c", &rounds])
                .env("DLOCK_REDIS", server.url())
                .env_remove("DLOCK_PREFIX")
                .env("PATH", path_with_dlock())
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut philosopher in philosophers {
        assert!(philosopher.wait().unwrap().success());
    }
    let took = started.elapsed();
    let seats: Vec<Vec<(u128, u128)>> = (0..SEATS)
        .map(|i| windows(&dir.path().join(format!("seat-{i}"))))
        .collect();
    for (i, seat) in seats.iter().enumerate() {
        assert_eq!(seat.len(), ROUNDS, "seat {i} ate every round");
    }
    // Fork i is shared by seats i-1 and i: their windows never overlap.
    let mut overlaps = 0;
    for i in 0..SEATS {
        let left = &seats[(i + SEATS - 1) % SEATS];
        for &(s1, e1) in left {
            for &(s2, e2) in &seats[i] {
                overlaps += usize::from(s1 < e2 && s2 < e1);
            }
        }
    }
    assert_eq!(overlaps, 0);
    // 30 meals of 50 ms with two at a time: a few seconds; a deadlock would last a lease.
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// How long `dlock acquire NAME --wait 30s --ttl 3s` waited, started now in a thread.
fn timed_acquire(server: &RedisServer, name: &'static str) -> std::thread::JoinHandle<Duration> {
    let mut command = dlock(server);
    command.args(["acquire", name, "--wait", "30s", "--ttl", "3s"]);
    std::thread::spawn(move || {
        let started = Instant::now();
        let acquired = output(&mut command);
        assert!(acquired.status.success(), "{acquired:?}");
        started.elapsed()
    })
}

#[test]
fn taking_forks_one_by_one_in_opposite_orders_deadlocks_until_a_lease() {
    let server = RedisServer::start();
    // The negative control: each process holds its first fork (a 3 s lease, not renewed:
    // `dlock acquire` prints the token and exits) and waits for the other's.
    for first in ["fork-a", "fork-b"] {
        assert_eq!(
            code(dlock(&server).args(["acquire", first, "--ttl", "3s"])),
            0
        );
    }
    let waits = [
        timed_acquire(&server, "fork-b"),
        timed_acquire(&server, "fork-a"),
    ];
    for wait in waits {
        let waited = wait.join().unwrap();
        assert!(
            waited >= Duration::from_millis(2500),
            "waited {waited:?}: no deadlock?"
        );
    }
    // The same two forks named in opposite orders by two multi-lock runs: no wait for a
    // lease.
    let started = Instant::now();
    let runs: Vec<Child> = [["fork-c", "fork-d"], ["fork-d", "fork-c"]]
        .into_iter()
        .map(|[first, second]| {
            dlock(&server)
                .args([
                    "run", first, "--also", second, "--ttl", TTL, "--", "sleep", "0.5",
                ])
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

//! Mutual exclusion across OS processes: counters incremented under `dlock run`, a
//! semaphore admitting N, readers and writers, and the fair, read, write and permits kinds
//! of `run`; each with its negative control.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

use crate::common::{code, dlock};

/// Four shell loops, each doing `rounds` read-sleep-write increments of a counter file,
/// through `dlock run` when `locked`. Returns the final count.
fn increment_from_processes(server: &RedisServer, dir: &Path, locked: bool, rounds: usize) -> u64 {
    let counter = dir.join("counter");
    std::fs::write(&counter, "0").unwrap();
    let rmw = format!(
        "v=$(cat {c}); sleep 0.01; echo $((v+1)) > {c}.$$ && mv {c}.$$ {c}",
        c = counter.display()
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let mut command = if locked {
                let mut c = dlock(server);
                c.args(["run", "counter", "--ttl", "5s", "--", "sh", "-c", &rmw]);
                c
            } else {
                let mut c = Command::new("sh");
                c.args(["-c", &rmw]);
                c
            };
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    assert_eq!(command.status().unwrap().code(), Some(0));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn processes_running_under_the_lock_never_lose_an_update() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(increment_from_processes(&server, dir.path(), true, 12), 48);
}

#[test]
fn negative_control_processes_without_the_lock_lose_updates() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert!(increment_from_processes(&server, dir.path(), false, 12) < 48);
}

/// Six processes, four rounds each, share a 2-permit semaphore through `dlock run
/// --permits 2` (or run unguarded). Each holder counts the holders present while it
/// holds; returns the largest count seen.
fn most_holders_across_processes(server: &RedisServer, dir: &Path, guarded: bool) -> usize {
    let holders = dir.join("holders");
    std::fs::create_dir_all(&holders).unwrap();
    let log = dir.join("counts");
    let script = format!(
        "touch {h}/$$; ls {h} | wc -l >> {log}; sleep 0.05; rm {h}/$$",
        h = holders.display(),
        log = log.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let mut command = if guarded {
                let mut c = dlock(server);
                c.args([
                    "run",
                    "pool",
                    "--permits",
                    "2",
                    "--ttl",
                    "5s",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ]);
                c
            } else {
                let mut c = Command::new("sh");
                c.args(["-c", &script]);
                c
            };
            std::thread::spawn(move || {
                for _ in 0..4 {
                    assert_eq!(command.status().unwrap().code(), Some(0));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let counts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(counts.lines().count(), 24);
    counts
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap()
}

#[test]
fn a_semaphore_across_processes_admits_n_and_never_more() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(most_holders_across_processes(&server, dir.path(), true), 2);
}

#[test]
fn negative_control_unguarded_processes_exceed_n() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert!(most_holders_across_processes(&server, dir.path(), false) > 2);
}

/// Readers and writers in separate processes check each other through marker files: a
/// writer fails (exit 98/99) if it meets a reader or writer, a reader (exit 97) if it meets
/// a writer. Returns the exit codes and the most readers one reader saw at once.
fn rwlock_across_processes(server: &RedisServer, dir: &Path, guarded: bool) -> (Vec<i32>, usize) {
    let (readers, writer, log) = (dir.join("r"), dir.join("w"), dir.join("seen"));
    std::fs::create_dir_all(&readers).unwrap();
    let write = format!(
        "mkdir {w} 2>/dev/null || exit 99; [ -z \"$(ls {r})\" ] || exit 98; sleep 0.03; rmdir {w}",
        w = writer.display(),
        r = readers.display()
    );
    let read = format!(
        "touch {r}/$$; [ -d {w} ] && exit 97; ls {r} | wc -l >> {log}; sleep 0.03; rm {r}/$$",
        w = writer.display(),
        r = readers.display(),
        log = log.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let (flag, script) = if i % 3 == 0 {
                ("--write", write.clone())
            } else {
                ("--read", read.clone())
            };
            let mut command = if guarded {
                let mut c = dlock(server);
                c.args([
                    "run", "config", flag, "--ttl", "5s", "--", "sh", "-c", &script,
                ]);
                c
            } else {
                let mut c = Command::new("sh");
                c.args(["-c", &script]);
                c
            };
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| command.status().unwrap().code().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let codes: Vec<i32> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let most_readers = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    (codes, most_readers)
}

#[test]
fn rwlock_across_processes_never_lets_a_writer_overlap() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (codes, most_readers) = rwlock_across_processes(&server, dir.path(), true);
    assert!(
        codes.iter().all(|&c| c == 0),
        "an overlap was seen: {codes:?}"
    );
    assert!(
        most_readers >= 2,
        "readers did overlap each other ({most_readers})"
    );
}

#[test]
fn negative_control_unguarded_readers_and_writers_collide() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (codes, _) = rwlock_across_processes(&server, dir.path(), false);
    assert!(
        codes.iter().any(|&c| c != 0),
        "the marker check never fired: {codes:?}"
    );
}

#[test]
fn run_with_fair_read_write_and_permits() {
    let server = RedisServer::start();
    for flags in [
        &["--fair"][..],
        &["--read"],
        &["--write"],
        &["--permits", "3"],
    ] {
        let mut args = vec!["run", "kinds"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[
            "--",
            "sh",
            "-c",
            "test -n \"$DLOCK_TOKEN\" && test \"$DLOCK_FENCE\" -gt 0",
        ]);
        assert_eq!(code(dlock(&server).args(&args)), 0, "{flags:?}");
    }
    // Held by a writer: a reader and another writer are busy (75).
    let mut writer = dlock(&server)
        .args(["run", "config", "--write", "--", "sleep", "2"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cmd::<Option<String>>(&["GET", "config"]).is_none() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        code(dlock(&server).args(["run", "config", "--read", "--no-wait", "--", "true"])),
        75
    );
    assert_eq!(
        code(dlock(&server).args(["run", "config", "--write", "--wait", "200ms", "--", "true"])),
        75
    );
    assert_eq!(writer.wait().unwrap().code(), Some(0));
    assert_eq!(
        code(dlock(&server).args(["run", "kinds", "--permits", "0", "--", "true"])),
        64
    );
    assert_eq!(
        code(dlock(&server).args(["run", "kinds", "--read", "--write", "--", "true"])),
        64
    );
}

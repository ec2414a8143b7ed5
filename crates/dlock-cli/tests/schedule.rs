//! Jobs started on every replica by cron: `--hold-at-least` makes a quick job whose
//! replicas' timers fire apart run once (the negative control, without it, runs it on
//! several), `--skip-if-ran-within` skips a job that succeeded under the lock lately
//! (and only one that succeeded), and `elect` keeps its leadership as long.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use dlock_testkit::RedisServer;

mod common;
use common::{dlock, output};

/// Five replicas whose cron fired 0.4 s apart, each running a 0.3 s job that appends a
/// line to `runs` under `dlock -q run NAME -n -E 0 [flags]`; returns how many ran it.
fn five_replicas(server: &RedisServer, dir: &Path, name: &str, flags: &[&str]) -> usize {
    let runs = dir.join(format!("{name}.runs"));
    let job = format!("echo ran >> {}; sleep 0.3", runs.display());
    let mut replicas: Vec<Child> = Vec::new();
    for _ in 0..5 {
        let mut command = dlock(server);
        command
            .args(["-q", "run", name, "-n", "-E", "0"])
            .args(flags);
        replicas.push(command.args(["--", "sh", "-c", &job]).spawn().unwrap());
        std::thread::sleep(Duration::from_millis(400));
    }
    for mut replica in replicas {
        assert!(replica.wait().unwrap().success());
    }
    std::fs::read_to_string(&runs)
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn a_quick_job_whose_replicas_fire_apart_runs_once_with_hold_at_least() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let once = five_replicas(&server, dir.path(), "nightly", &["--hold-at-least", "10s"]);
    assert_eq!(once, 1, "with --hold-at-least the job ran {once} times");
    // The negative control: without it, each replica finds the lock free.
    let many = five_replicas(&server, dir.path(), "nightly-bare", &[]);
    assert!(
        many > 1,
        "without --hold-at-least the job ran {many} time(s)"
    );
}

#[test]
fn a_lock_held_at_least_frees_by_itself_when_the_time_is_up() {
    let server = RedisServer::start();
    let held = output(dlock(&server).args(["run", "job", "--hold-at-least", "1s", "--", "true"]));
    assert!(held.status.success());
    let busy = output(dlock(&server).args(["run", "job", "-n", "--", "true"]));
    assert_eq!(busy.status.code(), Some(75));
    std::thread::sleep(Duration::from_millis(1500));
    let free = output(dlock(&server).args(["run", "job", "-n", "--", "true"]));
    assert!(free.status.success(), "{free:?}");
}

#[test]
fn a_job_that_succeeded_lately_is_skipped_and_one_that_failed_is_not() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let job = |code: u8| format!("echo ran >> {}; exit {code}", runs.display());
    let run = |code: u8, flags: &[&str]| {
        let mut command = dlock(&server);
        command.args(["run", "report", "--skip-if-ran-within", "1h"]);
        output(command.args(flags).args(["--", "sh", "-c", &job(code)]))
    };
    let ran = || std::fs::read_to_string(&runs).unwrap().lines().count();
    // A failure records nothing: the next run runs.
    assert_eq!(run(3, &[]).status.code(), Some(3));
    assert_eq!(run(0, &[]).status.code(), Some(0));
    assert_eq!(ran(), 2);
    // A success within the hour: skipped, as when busy (75, or -E N), and said so.
    let skipped = run(0, &[]);
    assert_eq!(skipped.status.code(), Some(75));
    let said = String::from_utf8_lossy(&skipped.stderr);
    assert!(
        said.contains("skipped") && said.contains("report"),
        "{said}"
    );
    let quiet = output(
        dlock(&server)
            .args([
                "-q",
                "run",
                "report",
                "--skip-if-ran-within",
                "1h",
                "-E",
                "0",
            ])
            .args(["--", "sh", "-c", &job(0)]),
    );
    assert_eq!(quiet.status.code(), Some(0));
    assert!(quiet.stderr.is_empty(), "{quiet:?}");
    assert_eq!(ran(), 2);
    // A window shorter than the record's age does not skip.
    std::thread::sleep(Duration::from_millis(300));
    let late = output(
        dlock(&server)
            .args(["run", "report", "--skip-if-ran-within", "200ms"])
            .args(["--", "sh", "-c", &job(0)]),
    );
    assert_eq!(late.status.code(), Some(0), "{late:?}");
    assert_eq!(ran(), 3);
}

#[test]
fn out_of_range_and_redlock_schedules_are_usage_errors() {
    let server = RedisServer::start();
    for flags in [
        &["--hold-at-least", "0s"][..],
        &["--hold-at-least", "25h"],
        &["--skip-if-ran-within", "0s"],
    ] {
        let refused = output(
            dlock(&server)
                .args(["run", "x"])
                .args(flags)
                .args(["--", "true"]),
        );
        assert_eq!(refused.status.code(), Some(64), "{flags:?}: {refused:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(
            said.contains(flags[0]) && said.contains("use 1ms to"),
            "{said}"
        );
    }
    let redlock = output(
        dlock(&server)
            .args(["--redis", &server.url(), "--redis", "redis://127.0.0.1:1"])
            .args(["--redis", "redis://127.0.0.1:2", "run", "x"])
            .args(["--skip-if-ran-within", "1h", "--", "true"]),
    );
    assert_eq!(redlock.status.code(), Some(64), "{redlock:?}");
}

#[test]
fn a_leader_that_steps_down_early_keeps_its_leadership_until_the_least_time() {
    let server = RedisServer::start();
    let elect = |flags: &[&str]| {
        let mut command = dlock(&server);
        command
            .args(["elect", "primary", "--value", "a", "-n"])
            .args(flags);
        output(command.args(["--", "true"]))
    };
    assert!(elect(&["--hold-at-least", "10s"]).status.success());
    assert_eq!(elect(&[]).status.code(), Some(75));
}

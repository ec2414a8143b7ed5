//! `--lock-delay`: a holder killed (`kill -9`) or stopped (SIGSTOP) keeps the lock
//! ungrantable until its lease ends and the delay after it; a clean end frees it at once.
//! The negative control kills a holder without the option: granted within its lease.

use std::process::Child;
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

mod common;
use common::{alive, code, dlock, output, wait_for_pid, wait_until_dead};

const DELAY: Duration = Duration::from_secs(3);

/// Starts `dlock run job --ttl 1s [flags] -- CMD` whose command writes its pid and sleeps;
/// returns dlock and the command's pid once it runs.
fn holder(server: &RedisServer, dir: &std::path::Path, flags: &[&str]) -> (Child, i32) {
    let pid_file = dir.join(format!("pid-{}", flags.len()));
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let child = dlock(server)
        .args(["run", "job", "--ttl", "1s"])
        .args(flags)
        .args(["--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    (child, wait_for_pid(&pid_file))
}

/// How long after `since` a waiting `dlock acquire job` is granted the lock (then released).
fn granted_after(server: &RedisServer, since: Instant) -> Duration {
    let acquired = output(dlock(server).args(["acquire", "job", "--wait", "30s"]));
    let after = since.elapsed();
    assert!(acquired.status.success(), "{acquired:?}");
    let token = String::from_utf8_lossy(&acquired.stdout);
    let token = token.split_whitespace().next().unwrap().to_string();
    assert_eq!(code(dlock(server).args(["release", "job", &token])), 0);
    after
}

#[test]
fn a_killed_holder_keeps_the_lock_until_its_lease_and_the_delay_have_passed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for delayed in [true, false] {
        let flags: &[&str] = if delayed {
            &["--lock-delay", "3s"]
        } else {
            &[]
        };
        let (mut dlock_process, command) = holder(&server, dir.path(), flags);
        dlock_process.kill().unwrap(); // SIGKILL: no release
        let killed = Instant::now();
        dlock_process.wait().unwrap();
        assert!(
            wait_until_dead(command, Duration::from_secs(5)),
            "the command outlived dlock"
        );
        let after = granted_after(&server, killed);
        if delayed {
            assert!(after >= DELAY, "granted {after:?} after the kill");
        } else {
            // The negative control: the lease's end (at most 1 s) frees it.
            assert!(
                after < DELAY,
                "without --lock-delay: granted {after:?} after: slow machine?"
            );
        }
    }
}

#[test]
fn a_stopped_holder_keeps_the_lock_until_its_lease_and_the_delay_have_passed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut dlock_process, command) = holder(&server, dir.path(), &["--lock-delay", "3s"]);
    let pid = dlock_process.id() as i32;
    // SAFETY: a signal to the dlock process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stopped = Instant::now();
    let after = granted_after(&server, stopped);
    assert!(after >= DELAY, "granted {after:?} after the stop");
    assert!(
        !alive(command),
        "the watchdog let the command run past the lease"
    );
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    assert_eq!(dlock_process.wait().unwrap().code(), Some(70));
}

#[test]
fn a_clean_end_frees_the_lock_at_once() {
    let server = RedisServer::start();
    let ran = output(dlock(&server).args(["run", "job", "--lock-delay", "1h", "--", "true"]));
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(
        code(dlock(&server).args(["run", "job", "-n", "--", "true"])),
        0
    );
    // A hold taken by `acquire` and extended with its delay, then released by token.
    let acquired = output(dlock(&server).args(["acquire", "job", "--lock-delay", "1h"]));
    let token = String::from_utf8_lossy(&acquired.stdout);
    let token = token.split_whitespace().next().unwrap().to_string();
    let extend = [
        "extend",
        "job",
        &token,
        "--ttl",
        "10s",
        "--lock-delay",
        "1h",
    ];
    assert_eq!(code(dlock(&server).args(extend)), 0);
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(
        left > 3_600_000,
        "{left} ms left after extend --lock-delay 1h"
    );
    assert_eq!(code(dlock(&server).args(["release", "job", &token])), 0);
    assert_eq!(
        code(dlock(&server).args(["run", "job", "-n", "--", "true"])),
        0
    );
}

#[test]
fn out_of_range_delays_are_usage_errors() {
    let server = RedisServer::start();
    for flags in [
        &["--lock-delay", "0s"][..],
        &["--ttl", "23h", "--lock-delay", "2h"],
    ] {
        let refused = output(
            dlock(&server)
                .args(["run", "x"])
                .args(flags)
                .args(["--", "true"]),
        );
        assert_eq!(refused.status.code(), Some(64), "{flags:?}: {refused:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("--lock-delay"), "{said}");
    }
}

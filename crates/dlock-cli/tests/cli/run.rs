//! `dlock run`: the lock in the child's environment, its exit code or signal passed
//! back, SIGTERM forwarded, the lease kept or lost, a killed dlock, and queued runs handed
//! the lock.

use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

use crate::common::{alive, code, dlock, output, wait_for_pid, wait_until_dead};

#[test]
fn run_passes_the_lock_to_the_child_and_its_exit_code_back() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env");
    let script = format!(
        "echo \"$DLOCK_NAME $DLOCK_TOKEN $DLOCK_FENCE\" > {}; sleep 1; exit 7",
        env_file.display()
    );
    let mut child = dlock(&server)
        .args(["run", "job", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&env_file).is_ok_and(|s| s.ends_with('\n')) {
        assert!(
            Instant::now() < deadline,
            "child never wrote its environment"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let env = std::fs::read_to_string(&env_file).unwrap();
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields[0], "job");
    let holder: String = server.cmd(&["GET", "job"]);
    assert_eq!(
        fields[1], holder,
        "DLOCK_TOKEN is the token in Redis while the child runs"
    );
    let fence: String = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(fields[2], fence);
    assert_eq!(child.wait().unwrap().code(), Some(7));
    let after: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(after, None, "released when the child exited");
}

#[test]
fn run_reports_a_signal_death_as_128_plus_the_signal() {
    let server = RedisServer::start();
    assert_eq!(
        code(dlock(&server).args(["run", "job", "--", "sh", "-c", "kill -9 $$"])),
        137
    );
    assert_eq!(code(dlock(&server).args(["run", "job", "--", "true"])), 0);
    assert_eq!(
        code(dlock(&server).args(["run", "job", "--", "/no/such/command"])),
        127
    );
}

#[test]
fn run_forwards_sigterm_to_the_child() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // The child writes its pid once its trap is set: a SIGTERM before that would kill it
    // without running the trap.
    let mut child = dlock(&server)
        .args([
            "run",
            "job",
            "--",
            "sh",
            "-c",
            &format!(
                "trap 'exit 42' TERM; echo $$ > {}; while :; do sleep 0.05; done",
                pid_file.display()
            ),
        ])
        .spawn()
        .unwrap();
    wait_for_pid(&pid_file);
    assert!(server.cmd::<Option<String>>(&["GET", "job"]).is_some());
    // SAFETY: signalling the dlock process this test spawned.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(
        child.wait().unwrap().code(),
        Some(42),
        "the child's trap ran and its code came back"
    );
    let after: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(after, None);
}

#[test]
fn run_keeps_a_short_lease_for_the_whole_command() {
    let server = RedisServer::start();
    let mut child = dlock(&server)
        .args(["run", "job", "--ttl", "1s", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    for checkpoint in [1_500, 2_500] {
        std::thread::sleep(Duration::from_millis(if checkpoint == 1_500 {
            1_500
        } else {
            1_000
        }));
        assert_eq!(
            code(dlock(&server).args(["acquire", "job", "--no-wait"])),
            75,
            "still held at {checkpoint} ms, past the 1 s lease"
        );
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_lost_lock_stops_the_command_and_exits_70() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // The command ignores SIGTERM, so only the SIGKILL after --kill-after ends it.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let child = dlock(&server)
        .env_remove("RUST_LOG")
        .args([
            "run",
            "job",
            "--ttl",
            "600ms",
            "--kill-after",
            "300ms",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = wait_for_pid(&pid_file);
    assert!(alive(pid));
    let _: () = server.cmd(&["SET", "job", "someone-else", "PX", "60000"]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(70));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lost the lock"), "{stderr}");
    // Said once: dlock's line (and its hint), not the library's log event of it as well.
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "the command kept running without the lock"
    );
    let value: String = server.cmd(&["GET", "job"]);
    assert_eq!(value, "someone-else", "the new holder was left alone");
}

#[test]
fn killing_dlock_kills_the_command_and_the_lock_frees_within_its_lease() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let mut child = dlock(&server)
        .args(["run", "job", "--ttl", "1s", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let pid = wait_for_pid(&pid_file);
    assert!(alive(pid), "control: the command runs while dlock does");
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "the command outlived dlock"
    );
    // Freed by the lease (1 s), not by a release.
    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--wait", "3s"])),
        0
    );
}

/// A queued `dlock run` handed the lock by the release runs its command: with the default
/// lease and waiter lease (it takes the grant as it is), with a waiter lease longer than
/// the lease (the same), and with one shorter (it makes one attempt, restoring its whole
/// lease).
#[test]
fn queued_runs_handed_the_lock_run_their_commands() {
    let server = RedisServer::start();
    for flags in [
        &["--fair"][..],
        &["--write"],
        &["--permits", "1"],
        &["--fair", "--waiter-lease", "60s"],
        &["--permits", "1", "--waiter-lease", "60s"],
        &["--fair", "--waiter-lease", "5s"],
        &["--write", "--waiter-lease", "5s"],
    ] {
        let name = format!("queued{}", flags.join(""));
        let mut holder_args = vec!["run", name.as_str()];
        holder_args.extend_from_slice(flags);
        holder_args.extend_from_slice(&["--", "sleep", "2"]);
        let mut holder = dlock(&server).args(&holder_args).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.cmd::<i64>(&["EXISTS", &name]) == 0 {
            assert!(
                Instant::now() < deadline,
                "{flags:?}: the holder never held"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Queued for more than a second before the release hands it the lock.
        let mut waiter_args = vec!["run", name.as_str()];
        waiter_args.extend_from_slice(flags);
        waiter_args.extend_from_slice(&["--", "sh", "-c", "sleep 1; echo ran"]);
        let waiter = output(dlock(&server).args(&waiter_args));
        assert!(holder.wait().unwrap().success(), "{flags:?}");
        assert_eq!(
            waiter.status.code(),
            Some(0),
            "{flags:?}: {}",
            String::from_utf8_lossy(&waiter.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&waiter.stdout),
            "ran\n",
            "{flags:?}"
        );
    }
}

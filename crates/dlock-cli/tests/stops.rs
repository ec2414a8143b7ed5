//! `dlock run` and stops from outside: which stops keep the lock, and that a command
//! never runs a step after its lock could have passed to another holder.
//!
//! * The command stopped (SIGSTOP by an operator, a debugger, a freezer of the command
//!   alone): dlock goes on renewing, the lock stays held, and when the command is
//!   continued and ends dlock exits with its code.
//! * dlock itself stopped past its lease (alone, or with the command, whoever is
//!   continued first): the watchdog kills the command's group when the lease could pass,
//!   so no line the command writes comes after another holder's grant.
//! * dlock stopped by name (`killall -STOP dlock`, `pkill -STOP -f dlock`): the watchdog
//!   has a name of its own, so it is not stopped with dlock and does the same.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{dlock, wait_for_pid};
use dlock_testkit::RedisServer;

fn signal(pid: i32, sig: i32) {
    // SAFETY: signalling a process this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// The state letter of `pid` in /proc (R, S, T, Z, ...).
fn state(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// Waits until `pid` is in state T (stopped).
fn wait_stopped(pid: i32) {
    let until = Instant::now() + Duration::from_secs(10);
    while state(pid) != 'T' {
        assert!(Instant::now() < until, "{pid} never stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `dlock acquire NAME --no-wait` by another process, retried until granted (or
/// `within` passes); returns the moment it was granted.
fn take_over(server: &RedisServer, name: &str, within: Duration) -> Option<Instant> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let out = dlock(server)
            .args(["acquire", name, "--no-wait", "--ttl", "30s"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.code() == Some(0) {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A command that writes its pid, then appends a line to `lines` every 10 ms, forever.
fn writer_loop(dir: &Path) -> String {
    format!(
        "echo $$ > {pid}; while :; do echo x >> {lines}; sleep 0.01; done",
        pid = dir.join("pid").display(),
        lines = dir.join("lines").display()
    )
}

fn lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("lines"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// The lines a command wrote after `granted` (another holder's grant): it is given a
/// moment to go on, then counted twice, 600 ms apart.
fn written_after(dir: &Path, at_grant: usize) -> usize {
    std::thread::sleep(Duration::from_millis(300));
    let soon = lines(dir);
    std::thread::sleep(Duration::from_millis(600));
    lines(dir).max(soon) - at_grant
}

/// Stops `stopped` (dlock, and whatever else the test names), lets another holder take
/// `name` once the lease passes, and checks that the command wrote nothing after that
/// grant and is dead; then continues them: dlock (`run`) must exit 70, the lock lost.
fn stop_until_taken_over(
    server: &RedisServer,
    name: &str,
    dir: &Path,
    stopped: &[i32],
    command: i32,
    run: Child,
    context: &str,
) {
    for &pid in stopped {
        signal(pid, libc::SIGSTOP);
    }
    for &pid in stopped {
        wait_stopped(pid);
    }
    let granted = take_over(server, name, Duration::from_secs(10));
    assert!(granted.is_some(), "the lock never passed on");
    let at_grant = lines(dir);
    assert_eq!(
        written_after(dir, at_grant),
        0,
        "the command wrote after another holder was granted its lock{context}"
    );
    assert!(!common::alive(command), "the command is still running");
    for &pid in stopped {
        signal(pid, libc::SIGCONT);
    }
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(70),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_writer(server: &RedisServer, name: &str, dir: &Path, ttl: &str) -> (Child, i32) {
    let child = dlock(server)
        .args([
            "run",
            name,
            "--ttl",
            ttl,
            "--",
            "sh",
            "-c",
            &writer_loop(dir),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command = wait_for_pid(&dir.join("pid"));
    (child, command)
}

#[test]
fn a_command_stopped_from_outside_keeps_the_lock_and_its_exit_code() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo $$ > {}; sleep 0.2; exit 7",
        dir.path().join("pid").display()
    );
    let mut run = dlock(&server)
        .args(["run", "paused", "--ttl", "1s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command = wait_for_pid(&dir.path().join("pid"));
    signal(command, libc::SIGSTOP);
    wait_stopped(command);
    // Three leases later the lock is still held, by a dlock that is not stopped.
    std::thread::sleep(Duration::from_secs(3));
    let dlock_pid = run.id() as i32;
    assert_ne!(state(dlock_pid), 'T', "dlock followed the command's stop");
    let busy = dlock(&server)
        .args(["acquire", "paused", "--no-wait"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        busy.status.code(),
        Some(75),
        "the paused command lost the lock"
    );
    signal(command, libc::SIGCONT);
    let status = run.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(7),
        "dlock exits with the command's code"
    );
    let held: Option<String> = server.cmd(&["GET", "paused"]);
    assert_eq!(held, None, "released after the command ended");
}

/// dlock stopped alone past its lease: the command is killed before the lock can pass.
/// The negative control runs the same loop without dlock and shows the check sees lines
/// written after the other grant.
#[test]
fn dlock_stopped_past_its_lease_never_lets_the_command_run_unprotected() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (run, command) = run_writer(&server, "frozen", dir.path(), "1s");
    std::thread::sleep(Duration::from_millis(300));
    let dlock_pid = run.id() as i32;
    stop_until_taken_over(
        &server,
        "frozen",
        dir.path(),
        &[dlock_pid],
        command,
        run,
        "",
    );

    // Negative control: the same loop, unprotected, goes on writing past a grant.
    let control = tempfile::tempdir().unwrap();
    let mut unprotected = Command::new("sh")
        .args(["-c", &writer_loop(control.path())])
        .spawn()
        .unwrap();
    wait_for_pid(&control.path().join("pid"));
    std::thread::sleep(Duration::from_millis(200));
    let at_grant = lines(control.path());
    assert!(
        written_after(control.path(), at_grant) > 0,
        "the check cannot see a command that writes on"
    );
    unprotected.kill().unwrap();
    let _ = unprotected.wait();
}

/// dlock and the command both stopped; the command continued first, after the lease:
/// it must not run a step.
#[test]
fn dlock_and_command_stopped_then_the_command_continued_first_stays_dead() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (run, command) = run_writer(&server, "both", dir.path(), "1s");
    std::thread::sleep(Duration::from_millis(300));
    let dlock_pid = run.id() as i32;
    signal(dlock_pid, libc::SIGSTOP);
    signal(command, libc::SIGSTOP);
    wait_stopped(dlock_pid);
    let granted = take_over(&server, "both", Duration::from_secs(10));
    assert!(granted.is_some(), "the lock never passed on");
    let at_grant = lines(dir.path());
    // Continued first, after the lock passed on: whatever continues it, it must not run.
    // SAFETY: signalling the command this test started (it may be gone already).
    let _ = unsafe { libc::kill(command, libc::SIGCONT) };
    assert_eq!(
        written_after(dir.path(), at_grant),
        0,
        "the command ran on after another holder was granted its lock"
    );
    signal(dlock_pid, libc::SIGCONT);
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(70),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!common::alive(command));
}

/// Every process in `root`'s tree (itself, its children, theirs...), from /proc.
fn tree_of(root: i32) -> Vec<i32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: the comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        tree.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    tree
}

/// `/proc/PID/comm`, the name `killall` and `pkill` match.
fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// `/proc/PID/cmdline`, the command line `pkill -f` matches, arguments joined by spaces.
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}

/// Continues the stopped processes and kills the command's group when the test ends,
/// also when it fails: nothing of it is left stopped or running.
struct Thaw {
    stopped: Vec<i32>,
    command: i32,
}

impl Drop for Thaw {
    fn drop(&mut self) {
        // SAFETY: signalling the command's group and the processes this test stopped.
        unsafe {
            if self.command > 1 {
                libc::killpg(self.command, libc::SIGKILL);
            }
            for pid in &self.stopped {
                libc::kill(*pid, libc::SIGCONT);
            }
        }
    }
}

/// A stop of dlock by name, as `killall -STOP dlock` and `pkill -STOP -f dlock` act (every
/// process of dlock's own tree whose comm is `dlock` or whose command line says dlock),
/// leaves the watchdog running under a name of its own: it kills the command before the
/// lease can pass, so no line is written after another holder's grant.
#[test]
fn a_stop_of_dlock_by_name_leaves_the_watchdog_to_kill_the_command() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (run, command) = run_writer(&server, "by-name", dir.path(), "2s");
    std::thread::sleep(Duration::from_millis(300));
    let dlock_pid = run.id() as i32;
    let tree = tree_of(dlock_pid);
    let watchdog = tree
        .iter()
        .copied()
        .find(|pid| cmdline(*pid).contains("__watch-group"))
        .expect("dlock run has a watchdog");
    let (watchdog_comm, watchdog_cmdline) = (comm(watchdog), cmdline(watchdog));
    let named: Vec<i32> = tree
        .iter()
        .copied()
        .filter(|pid| comm(*pid) == "dlock" || cmdline(*pid).contains("dlock"))
        .collect();
    assert!(named.contains(&dlock_pid), "{named:?}");
    let _thaw = Thaw {
        stopped: named.clone(),
        command,
    };
    let context =
        format!(" (stopped by name: {named:?}, the watchdog {watchdog} is {watchdog_comm:?})");
    stop_until_taken_over(
        &server,
        "by-name",
        dir.path(),
        &named,
        command,
        run,
        &context,
    );
    // Its name and command line say what it is, and not dlock.
    assert_eq!(watchdog_comm, "lock-watchdog");
    assert!(
        watchdog_cmdline.starts_with("lock-watchdog ") && !watchdog_cmdline.contains("dlock"),
        "{watchdog_cmdline}"
    );
}

/// dlock stopped at the instant of its grant, before the command starts or before it told
/// the watchdog a first deadline (found in review of issue 32: continued past the lease, it
/// started the command anyway, or the watchdog, knowing no deadline yet, let the command
/// run beside the next holder). The stop lands on the lock key's keyspace event, so it
/// falls somewhere in that window; whichever way, the command never writes after another
/// holder was granted, and dlock, continued, exits 70.
#[test]
fn dlock_stopped_at_its_grant_never_starts_or_leaves_the_command_unprotected() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["CONFIG", "SET", "notify-keyspace-events", "K$"]);
    for round in 0..3 {
        let name = format!("at-grant-{round}");
        let dir = tempfile::tempdir().unwrap();
        let mut events = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut pubsub = events.as_pubsub();
        pubsub.subscribe(format!("__keyspace@0__:{name}")).unwrap();
        let run = dlock(&server)
            .args([
                "run",
                &name,
                "--ttl",
                "1s",
                "--",
                "sh",
                "-c",
                &writer_loop(dir.path()),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let dlock_pid = run.id() as i32;
        pubsub
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let event: String = pubsub.get_message().unwrap().get_payload().unwrap();
        signal(dlock_pid, libc::SIGSTOP);
        assert_eq!(event, "set", "round {round}: the grant");
        drop(pubsub);
        // The command may not have started yet: its group is killed at the end if it did.
        let mut thaw = Thaw {
            stopped: vec![dlock_pid],
            command: 0,
        };
        wait_stopped(dlock_pid);
        let granted = take_over(&server, &name, Duration::from_secs(10));
        assert!(granted.is_some(), "round {round}: the lock never passed on");
        let at_grant = lines(dir.path());
        assert_eq!(
            written_after(dir.path(), at_grant),
            0,
            "round {round}: the command wrote beside the next holder while dlock was stopped"
        );
        signal(dlock_pid, libc::SIGCONT);
        let at_continue = lines(dir.path());
        let out = run.wait_with_output().unwrap();
        thaw.command = std::fs::read_to_string(dir.path().join("pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok())
            .unwrap_or(0);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            lines(dir.path()),
            at_continue,
            "round {round}: the command ran once dlock was continued past its lease"
        );
        assert_eq!(
            out.status.code(),
            Some(70),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

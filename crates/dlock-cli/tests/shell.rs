//! `dlock` in production shells: the command's whole process tree, signals delivered once,
//! cancelled waits that leave nothing behind, flock's habits, `inspect`, least privilege,
//! and the scripts wherever cargo puts its output.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

mod common;
use common::{alive, code, dlock, output, wait_for_pid, wait_until_dead};

/// A shell command that starts a grandchild `sleep 30` in the background, records its pid
/// in `pid_file`, ignores SIGTERM when `stubborn`, and waits.
fn tree_script(pid_file: &Path, stubborn: bool) -> String {
    let trap = if stubborn { "trap '' TERM; " } else { "" };
    format!(
        "{trap}sleep 30 & echo $! > {}; while :; do sleep 0.05; done",
        pid_file.display()
    )
}

#[test]
fn the_whole_tree_stops_on_loss() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild");
    let script = tree_script(&pid_file, false);
    let child = dlock(&server)
        .args(["run", "job", "--ttl", "900ms", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let grandchild = wait_for_pid(&pid_file);
    assert!(alive(grandchild));
    let _: i64 = server.cmd(&["DEL", "job"]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(
        wait_until_dead(grandchild, Duration::from_secs(2)),
        "the grandchild went on without the lock"
    );
}

#[test]
fn the_whole_tree_gets_sigkill_after_kill_after() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild");
    // The shell ignores SIGTERM (and so does its background child, which inherits it).
    let script = tree_script(&pid_file, true);
    let child = dlock(&server)
        .args([
            "run",
            "job",
            "--ttl",
            "2s",
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
    let grandchild = wait_for_pid(&pid_file);
    let _: () = server.cmd(&["SET", "job", "someone-else", "PX", "60000"]);
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        wait_until_dead(grandchild, Duration::from_secs(2)),
        "SIGKILL did not reach the grandchild"
    );
}

#[test]
fn the_whole_tree_dies_with_a_killed_dlock_but_an_escaped_process_shows_the_check_works() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild");
    let escaped_file = dir.path().join("escaped");
    // One grandchild stays in the command's process group; another escapes it with
    // setsid (the documented limit), which proves the liveness check can see a survivor.
    let script = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 30' & {}",
        escaped_file.display(),
        tree_script(&pid_file, false)
    );
    let mut child = dlock(&server)
        .args(["run", "job", "--ttl", "1s", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let grandchild = wait_for_pid(&pid_file);
    let escaped = wait_for_pid(&escaped_file);
    child.kill().unwrap(); // SIGKILL: dlock has no chance to clean up
    child.wait().unwrap();
    assert!(
        wait_until_dead(grandchild, Duration::from_secs(3)),
        "the grandchild outlived a killed dlock"
    );
    assert!(
        alive(escaped),
        "negative control: a process outside the group survives"
    );
    // SAFETY: killing the control process this test started.
    unsafe {
        libc::kill(escaped, libc::SIGKILL);
    }
}

/// A dlock killed the instant its command has started a process leaves nothing behind: the
/// watchdog knows the command's group before the command runs (the command's process
/// tells it between fork and exec), so there is no gap in which a grandchild could be
/// started unwatched. (The escaped process of the test above shows the liveness check can
/// see a survivor.) Before the watchdog started first, 1 to 3 runs in 100 left the
/// grandchild running: this test caught that order about half the time.
#[test]
fn a_dlock_killed_as_its_command_starts_leaves_no_process_behind() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for run in 0..100 {
        let pid_file = dir.path().join(format!("grandchild-{run}"));
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let mut child = dlock(&server)
            .args([
                "run",
                &format!("race-{run}"),
                "--ttl",
                "1s",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .spawn()
            .unwrap();
        // As soon as the grandchild exists, not a poll interval later.
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "run {run}: the command never started"
            );
            std::thread::yield_now();
        };
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            wait_until_dead(grandchild, Duration::from_secs(3)),
            "run {run}: the grandchild outlived a dlock killed as the command started"
        );
    }
}

/// Not a test of its own: this test binary, run with `DLOCK_TEST_COUNT_SIGINTS=FILE`, is
/// the command of the SIGINT tests. It counts the SIGINTs it gets into FILE (re-installing
/// the handler, so even a shell's background job, which starts with SIGINT ignored,
/// counts) and exits a second after the first.
#[test]
fn sigint_counter_helper() {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNT: AtomicU32 = AtomicU32::new(0);
    extern "C" fn on_interrupt(_: libc::c_int) {
        COUNT.fetch_add(1, Ordering::SeqCst);
    }
    let Ok(file) = std::env::var("DLOCK_TEST_COUNT_SIGINTS") else {
        return;
    };
    // SAFETY: the handler only touches an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
    std::fs::write(&file, "0").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first: Option<Instant> = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let count = COUNT.load(Ordering::SeqCst);
        std::fs::write(&file, count.to_string()).unwrap();
        match first {
            None if count > 0 => first = Some(Instant::now()),
            Some(at) if at.elapsed() > Duration::from_secs(1) => return,
            _ => {}
        }
    }
}

/// The command line that runs [`sigint_counter_helper`] as a counting command.
fn counter_command() -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    vec![
        exe.display().to_string(),
        "--exact".into(),
        "sigint_counter_helper".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

/// Runs `launcher` (dlock, or a naive wrapper) in a process group of its own around the
/// counting command, interrupts that whole process group once (as Ctrl-C does), and
/// returns the count.
fn interrupts_counted(mut launcher: Command, count_file: &Path) -> u32 {
    let mut child = launcher
        .env("DLOCK_TEST_COUNT_SIGINTS", count_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(count_file)
        .ok()
        .as_deref()
        .map(str::trim)
        != Some("0")
    {
        assert!(Instant::now() < deadline, "the counter never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the launcher finish setting up (the naive wrapper records the child's pid).
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signalling the process group this test just created.
    unsafe {
        libc::killpg(child.id() as libc::pid_t, libc::SIGINT);
    }
    let _ = child.wait();
    std::fs::read_to_string(count_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn an_interrupted_process_group_delivers_one_sigint() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let count_file = dir.path().join("count");
    let mut run = dlock(&server);
    run.args(["run", "job", "--"]).args(counter_command());
    assert_eq!(interrupts_counted(run, &count_file), 1);

    // Negative control: a wrapper that forwards SIGINT to a child in its own process
    // group delivers it twice (the group's and the forward), as dlock used to. (The
    // forward waits a moment: two SIGINTs pending at once would merge into one.)
    let _ = std::fs::remove_file(&count_file);
    let mut naive = Command::new("sh");
    naive
        .arg("-c")
        .arg("trap 'sleep 0.2; kill -INT $child' INT; \"$@\" & child=$!; wait $child; wait $child")
        .arg("naive-wrapper")
        .args(counter_command());
    assert_eq!(interrupts_counted(naive, &count_file), 2);
}

#[test]
fn a_signal_while_waiting_gives_the_queue_place_back() {
    let server = RedisServer::start();
    for kind in ["--fair", "--write", "--permits=1"] {
        let holder = output(dlock(&server).args(["acquire", "job", kind, "--ttl", "30s"]));
        assert_eq!(holder.status.code(), Some(0));
        let token = String::from_utf8(holder.stdout).unwrap();
        let token = token.split_whitespace().next().unwrap().to_string();
        // `timeout 1 dlock run ...` while the lock is held.
        let status = Command::new("timeout")
            .args([
                "1",
                env!("CARGO_BIN_EXE_dlock"),
                "run",
                "job",
                kind,
                "--",
                "true",
            ])
            .env("DLOCK_REDIS", server.url())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(124), "{kind}: timed out while waiting");
        let queued: i64 = server.cmd(&["ZCARD", "{job}:queue"]);
        assert_eq!(queued, 0, "{kind}: the interrupted waiter left its place");
        assert_eq!(
            code(dlock(&server).args(["release", "job", &token, kind])),
            0
        );
        // The lock is free and nobody queues: the next run goes at once.
        assert_eq!(
            code(dlock(&server).args(["run", "job", kind, "--no-wait", "--", "true"])),
            0,
            "{kind}"
        );
    }

    // Negative control: a waiter killed with SIGKILL cannot give its place back.
    let holder = output(dlock(&server).args(["acquire", "job", "--fair"]));
    let token = String::from_utf8(holder.stdout).unwrap();
    let mut waiter = dlock(&server)
        .args(["run", "job", "--fair", "--", "true"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["ZCARD", "{job}:queue"]) == 0 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.cmd::<i64>(&["ZCARD", "{job}:queue"]), 1);
    let token = token.split_whitespace().next().unwrap();
    assert_eq!(
        code(dlock(&server).args(["release", "job", token, "--fair"])),
        0
    );
    assert_eq!(
        code(dlock(&server).args(["run", "job", "--fair", "--no-wait", "--", "true"])),
        75,
        "the dead waiter's place blocks the queue until its waiter lease ends"
    );
}

/// `timeout` sends its SIGTERM twice (to dlock, then to its process group): that is one
/// stop, and the clean-up still gives the queue place back, however long it takes (here
/// Redis is paused through both signals, and the give-back needs two round trips: its
/// script is not cached). The repeat is the same stop however late it arrives: on a loaded
/// machine `timeout` can be kept off the CPU between its two `kill`s (and dlock can take
/// as long to see the repeat), which once made dlock exit in the middle of its clean-up. A
/// SIGTERM from another process well after the first is someone insisting: dlock ends at
/// once, with Redis still paused, long before the clean-up's bound (three response
/// timeouts, 9 s) would end it, and the place is left to lapse.
#[test]
fn a_signal_repeated_by_its_sender_is_one_stop_and_another_sender_cuts_the_clean_up_short() {
    use std::os::unix::process::ExitStatusExt as _;
    let server = RedisServer::start();
    let holder = output(dlock(&server).args(["acquire", "job", "--fair", "--ttl", "60s"]));
    assert_eq!(holder.status.code(), Some(0));
    let queued = |server: &RedisServer| -> i64 { server.cmd(&["ZCARD", "{job}:queue"]) };
    for (gap, from_another, repeat) in [
        (Duration::from_millis(50), false, "the same stop"),
        (
            Duration::from_millis(1_500),
            false,
            "the same stop, repeated late",
        ),
        (Duration::from_millis(1_500), true, "insisting"),
    ] {
        let mut waiter = dlock(&server)
            .args(["run", "job", "--fair", "--", "true"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while queued(&server) < 1 {
            assert!(
                Instant::now() < deadline,
                "{repeat}: the waiter never queued"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        server.pause();
        let pid = waiter.id() as libc::pid_t;
        // SAFETY: signals a child this test started and has not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        std::thread::sleep(gap);
        if from_another {
            let kill = Command::new("sh")
                .args(["-c", &format!("kill -TERM {pid}")])
                .status()
                .unwrap();
            assert!(kill.success());
        } else {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let signalled = Instant::now();
        let status = if !from_another {
            std::thread::sleep(Duration::from_millis(300));
            server.resume();
            waiter.wait().unwrap()
        } else {
            let status = loop {
                if let Some(status) = waiter.try_wait().unwrap() {
                    break status;
                }
                if signalled.elapsed() > Duration::from_secs(4) {
                    server.resume();
                    panic!("{repeat}: dlock went on with its clean-up");
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            server.resume();
            status
        };
        assert!(
            status.code() == Some(143) || status.signal() == Some(libc::SIGTERM),
            "{repeat}: {status:?}"
        );
        let left = if from_another { 1 } else { 0 };
        assert_eq!(queued(&server), left, "{repeat}: the queue place");
    }
}

#[test]
fn acquire_without_a_reader_for_the_token_leaves_nothing_held() {
    let server = RedisServer::start();
    let bin = env!("CARGO_BIN_EXE_dlock");
    // The reader closes its end before dlock prints: the write fails. dlock starts only
    // once the reader has closed it, however late the reader's subshell runs.
    let dir = tempfile::tempdir().unwrap();
    let closed = dir.path().join("closed");
    let closed = closed.display();
    let status = Command::new("bash")
        .args([
            "-c",
            &format!(
                "(until [ -e {closed} ]; do sleep 0.01; done; exec {bin} acquire job) \
                 | (exec 0<&-; touch {closed}; sleep 1); exit ${{PIPESTATUS[0]}}"
            ),
        ])
        .env("DLOCK_REDIS", server.url())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(74));
    assert!(String::from_utf8_lossy(&status.stderr).contains("released"));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);

    // stdout closed altogether: nothing is taken.
    let closed = Command::new("bash")
        .args(["-c", &format!("{bin} acquire job >&-")])
        .env("DLOCK_REDIS", server.url())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(closed.status.code(), Some(74));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);

    // inspect, whose output is all it does, says so too (a --watch would never end).
    for args in [
        "inspect job",
        "inspect job --prometheus",
        "inspect job --watch",
    ] {
        let closed = Command::new("bash")
            .args(["-c", &format!("{bin} {args} >&-")])
            .env("DLOCK_REDIS", server.url())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(closed.status.code(), Some(74), "{args}");
    }

    // Control: printed to a reader, the lock stays held for its lease.
    let out = output(dlock(&server).args(["acquire", "job"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 1);
}

#[test]
fn flock_habits_conflict_exit_code_and_quiet() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
    let busy = output(dlock(&server).args(["run", "job", "-n", "-E", "3", "--", "true"]));
    assert_eq!(busy.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("held by another owner"));
    let quiet = output(dlock(&server).args(["-q", "run", "job", "--no-wait", "--", "true"]));
    assert_eq!(quiet.status.code(), Some(75));
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let timed = output(dlock(&server).args(["-q", "acquire", "job", "--wait", "200ms", "-E", "9"]));
    assert_eq!(timed.status.code(), Some(9));
    assert!(timed.stderr.is_empty());
    // Quiet is about "busy" only: real errors still speak.
    // flock accepts -E 0 (busy is fine, say nothing), as the README's cron example does.
    let fine = output(dlock(&server).args(["-q", "run", "job", "-n", "-E", "0", "--", "true"]));
    assert_eq!(fine.status.code(), Some(0));
    let bad = output(dlock(&server).args(["-q", "run", "", "--", "true"]));
    assert_eq!(bad.status.code(), Some(64));
    assert!(!bad.stderr.is_empty());
}

#[test]
fn every_kind_from_the_shell_and_inspect_as_json() {
    let server = RedisServer::start();
    let take = |name: &str, kind: &[&str]| {
        let mut args = vec!["acquire", name, "--ttl", "30s"];
        args.extend_from_slice(kind);
        let out = output(dlock(&server).args(&args));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8(out.stdout).unwrap();
        line.split_whitespace().next().unwrap().to_string()
    };
    let kinds: [(&str, &[&str], &str); 5] = [
        ("m", &[], "exclusive"),
        ("f", &["--fair"], "exclusive"),
        ("r", &["--read"], "read"),
        ("w", &["--write"], "exclusive"),
        ("s", &["--permits", "2"], "semaphore"),
    ];
    for (name, kind, shown) in kinds {
        let token = take(name, kind);
        let mut extend = vec!["extend", name, &token, "--ttl", "60s"];
        extend.extend_from_slice(kind);
        assert_eq!(code(dlock(&server).args(&extend)), 0, "{name}");
        let out = output(dlock(&server).args(["inspect", name, "--json"]));
        assert_eq!(out.status.code(), Some(0));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["kind"], shown, "{info}");
        assert_eq!(info["holders"].as_array().unwrap().len(), 1, "{info}");
        let holder = &info["holders"][0];
        assert!(
            holder["pid"].as_u64().unwrap() > 0,
            "a dlock holder names its pid: {info}"
        );
        assert!(holder["host"].as_str().is_some());
        assert!(
            holder["remaining_ms"].as_u64().unwrap() > 50_000,
            "extended: {info}"
        );
        assert!(info["last_fence"].as_u64().unwrap() > 1, "{info}");
        let mut release = vec!["release", name, &token];
        release.extend_from_slice(kind);
        assert_eq!(code(dlock(&server).args(&release)), 0, "{name}");
        assert_eq!(code(dlock(&server).args(&release)), 77, "{name}: only once");
        let out = output(dlock(&server).args(["inspect", name, "--json"]));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["kind"], "free");
    }
    // --match finds locks with SCAN and leaves out companion keys.
    take("batch:1", &[]);
    take("batch:2", &["--read"]);
    let out = output(dlock(&server).args(["inspect", "--match", "batch:*", "--json"]));
    let names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["batch:1", "batch:2"]);
    let table = output(dlock(&server).args(["inspect", "batch:1"]));
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("batch:1") && text.contains("dlock pid"),
        "{text}"
    );
}

#[test]
fn inspect_as_prometheus_text_names_who_holds_what() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args(["acquire", "jobs:held", "--ttl", "30s"]));
    assert_eq!(out.status.code(), Some(0));
    let token = String::from_utf8(out.stdout).unwrap();
    let token = token.split_whitespace().next().unwrap().to_string();
    assert_eq!(
        code(dlock(&server).args(["acquire", "jobs:fair", "--fair", "--ttl", "30s"])),
        0
    );
    // A waiter in the fair lock's queue, in a process of its own.
    let mut waiter = dlock(&server)
        .args(["acquire", "jobs:fair", "--fair", "--wait", "20s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let scrape = || {
        let out = output(dlock(&server).args(["inspect", "--match", "jobs:*", "--prometheus"]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = scrape();
        if text.contains("dlock_lock_queue_length{lock=\"jobs:fair\"} 1") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no queued waiter:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = waiter.kill();
    let _ = waiter.wait();

    // The exposition format: each family's HELP and TYPE, then its samples, each
    // `name{labels} value` with a number for the value.
    let mut family = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            family = rest.split(' ').next().unwrap().to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            assert_eq!(rest, format!("{family} gauge"));
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(
            series.starts_with(&format!("{family}{{")),
            "{line} outside {family}"
        );
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
    }
    let sample = |series: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(sample("dlock_lock_held{lock=\"jobs:held\"}"), 1.0);
    assert_eq!(sample("dlock_lock_holders{lock=\"jobs:held\"}"), 1.0);
    let lease = sample("dlock_lock_lease_remaining_seconds{lock=\"jobs:held\"}");
    assert!(lease > 0.0 && lease <= 30.0, "{lease}");
    assert!(sample("dlock_lock_last_fence{lock=\"jobs:held\"}") > 1.0);
    assert_eq!(
        sample("dlock_lock_info{lock=\"jobs:held\",kind=\"exclusive\"}"),
        1.0
    );
    // A name given twice is shown once: a repeated series is refused by scrapers.
    let out = output(dlock(&server).args(["inspect", "jobs:held", "jobs:held", "--prometheus"]));
    let twice = String::from_utf8(out.stdout).unwrap();
    let series: Vec<&str> = twice.lines().filter(|l| !l.starts_with('#')).collect();
    let mut unique = series.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(series.len(), unique.len(), "{twice}");
    assert!(
        twice.contains("dlock_lock_held{lock=\"jobs:held\"} 1"),
        "{twice}"
    );
    // Who holds it: the token's prefix and the dlock process.
    let holder = text
        .lines()
        .find(|line| {
            line.starts_with("dlock_lock_holder_lease_remaining_seconds{lock=\"jobs:held\"")
        })
        .unwrap_or_else(|| panic!("no holder series:\n{text}"));
    let shown = holder
        .split("token=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        shown.len() >= 8 && token.contains(shown),
        "{shown} of {token}"
    );
    assert!(holder.contains("holder=\"dlock pid "), "{holder}");

    // Released: --match no longer finds it; by name it is free, with no lease and no
    // holder series.
    assert_eq!(
        code(dlock(&server).args(["release", "jobs:held", &token])),
        0
    );
    assert!(!scrape().contains("lock=\"jobs:held\""));
    let out = output(dlock(&server).args(["inspect", "jobs:held", "--prometheus"]));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("dlock_lock_held{lock=\"jobs:held\"} 0")
            && text.contains("dlock_lock_info{lock=\"jobs:held\",kind=\"free\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("dlock_lock_lease_remaining_seconds{lock=\"jobs:held\""),
        "{text}"
    );
    assert!(
        !text.contains("dlock_lock_holder_lease_remaining_seconds{lock=\"jobs:held\""),
        "{text}"
    );
    // Not with --json or --watch: a usage error.
    assert_eq!(
        code(dlock(&server).args(["inspect", "x", "--prometheus", "--json"])),
        64
    );
}

#[test]
fn a_forced_release_bumps_the_fence() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args(["acquire", "job"]));
    let line = String::from_utf8(out.stdout).unwrap();
    let fence: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    // Only by name, and only when asked for.
    assert_eq!(code(dlock(&server).args(["release", "job"])), 64);
    assert_eq!(
        code(dlock(&server).args(["release", "--force", "job", "--read"])),
        64
    );
    let forced = output(dlock(&server).args(["release", "--force", "job"]));
    assert_eq!(forced.status.code(), Some(0));
    let new_fence: u64 = String::from_utf8(forced.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(new_fence > fence, "the evicted holder's fence is now stale");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);
    let next = output(dlock(&server).args(["acquire", "job", "--no-wait"]));
    let next_fence: u64 = String::from_utf8(next.stdout)
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(next_fence > new_fence);
    // Forcing a free name changes nothing.
    let _: i64 = server.cmd(&["DEL", "job"]);
    assert_eq!(code(dlock(&server).args(["release", "--force", "job"])), 0);
    let counter: u64 = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(counter, next_fence);
}

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
    let help = String::from_utf8(run(&["run", "--help"]).stdout).unwrap();
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

/// The one `ACL SETUSER` line of the README, for prefix `myapp:` and the given password.
fn readme_acl_line(password: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("redis-cli ACL SETUSER dlock "))
        .expect("the README has the ACL line");
    // Undo the shell quoting of the README's command line.
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
fn the_readmes_acl_line_is_enough_for_every_primitive_and_nothing_more() {
    let server = RedisServer::start();
    let words = readme_acl_line("pw");
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
        &["--duration", "100ms", "--renew-locks", "50", "--json"],
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

/// A terminal of its own (tmux on a private socket) running an interactive shell.
struct Terminal {
    socket: String,
}

impl Terminal {
    fn start(env: &[(&str, String)]) -> Terminal {
        let socket = format!("dlock-test-{}-{}", std::process::id(), rand_suffix());
        let mut command = Command::new("tmux");
        command.args([
            "-L",
            &socket,
            "new-session",
            "-d",
            "-x",
            "160",
            "-y",
            "40",
            "bash --norc --noprofile",
        ]);
        for (key, value) in env {
            command.env(key, value);
        }
        assert!(command.status().unwrap().success(), "tmux starts");
        let terminal = Terminal { socket };
        terminal.wait_for("bash-");
        terminal
    }

    fn send(&self, keys: &[&str]) {
        let mut args = vec!["-L", &self.socket, "send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        assert!(Command::new("tmux").args(&args).status().unwrap().success());
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "never saw {text:?} in:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

#[test]
fn in_a_terminal_the_command_reads_it_and_ctrl_z_and_ctrl_c_behave() {
    let server = RedisServer::start();
    let terminal = Terminal::start(&[("PATH", std::env::var("PATH").unwrap())]);
    let bin = format!("{} --redis {}", env!("CARGO_BIN_EXE_dlock"), server.url());
    // The command reads the terminal (it was handed the terminal).
    terminal.send(&[
        &format!("{bin} run job -- sh -c 'read a; echo got:$a'"),
        "Enter",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    terminal.send(&["hello", "Enter"]);
    terminal.wait_for("got:hello");
    // Ctrl-Z suspends command and dlock together and the shell takes over.
    terminal.send(&["clear", "Enter"]);
    terminal.send(&[&format!("{bin} run job -- sleep 30"), "Enter"]);
    std::thread::sleep(Duration::from_millis(500));
    terminal.send(&["C-z"]);
    terminal.wait_for("Stopped");
    terminal.send(&["echo shell-is-back", "Enter"]);
    terminal.wait_for("shell-is-back\n");
    // fg resumes; Ctrl-C then ends the command, dlock releases and the shell sees 130.
    terminal.send(&["fg", "Enter"]);
    std::thread::sleep(Duration::from_millis(500));
    terminal.send(&["C-c"]);
    std::thread::sleep(Duration::from_millis(500));
    terminal.send(&["echo rc=$?", "Enter"]);
    terminal.wait_for("rc=130");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0, "released");
    // Ctrl-Z then bg: the job goes on in the background and the shell keeps its terminal
    // (while the job runs, and after it ends).
    terminal.send(&["clear", "Enter"]);
    terminal.send(&[&format!("{bin} run job -- sleep 1"), "Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    terminal.send(&["C-z"]);
    terminal.wait_for("Stopped");
    terminal.send(&["bg", "Enter"]);
    terminal.send(&["echo still-here", "Enter"]);
    terminal.wait_for("still-here\n");
    std::thread::sleep(Duration::from_millis(1500));
    terminal.send(&["echo shell-kept-its-terminal", "Enter"]);
    terminal.wait_for("shell-kept-its-terminal\n");
}

/// How many keys the server has expired so far (`INFO stats`).
fn expired_keys(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "stats"]);
    info.lines()
        .find_map(|line| line.strip_prefix("expired_keys:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("INFO stats has expired_keys")
}

#[test]
fn when_renewals_fail_the_command_is_killed_before_the_lease_can_pass_on() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // A command that ignores SIGTERM: only the SIGKILL ends it.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.02; done",
        pid_file.display()
    );
    let child = dlock(&server)
        .args([
            "run",
            "job",
            // Long enough that the margin below (the slack and drift allowance, about
            // 480 ms) covers a test process scheduled late on a loaded machine.
            "--ttl",
            "8s",
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
    std::thread::sleep(Duration::from_millis(200));
    let expired_before = expired_keys(&server);
    server.pause(); // renewals now fail (time out)
    let paused = Instant::now();
    while alive(pid) {
        assert!(
            // The stop comes about 7.5 s after the pause (the 8 s lease, less its margins).
            paused.elapsed() < Duration::from_secs(20),
            "the command was never stopped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    server.resume();
    // The lease (8 s from the last renewal: its 6 % of slack and drift allowance must
    // exceed how late this test looks after seeing the command die) has not run out:
    // nobody else could have been granted while the command still ran.
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    // Gone is fine only when `dlock run` released it after the server came back (it
    // gives the lock back as it exits): then no key expired.
    assert!(
        pttl > 0 || expired_keys(&server) == expired_before,
        "the command outlived the lease ({pttl})"
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kept failing"));
}

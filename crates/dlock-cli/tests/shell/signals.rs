//! Signals from a shell: one SIGINT per Ctrl-C to a process group, a cancelled wait that
//! gives its queue place back, a repeated signal, and a command in a terminal of its own
//! (Ctrl-Z, Ctrl-C).

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, output};

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
        "signals::sigint_counter_helper".into(),
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

//! Standard output and error that cannot be written (closed, a reader gone, a read-write
//! /dev/null, a reader that leaves early): exit 74 or 0 as the case is, never a panic, and
//! no exit code changed by a log line.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, output};

#[test]
fn inspect_output_that_cannot_be_written_is_an_error_not_a_panic() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["SET", "held", "someone"]);
    // A full device: reported, exit 74.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = dlock(&server)
        .args(["inspect", "held"])
        .stdout(full)
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{stderr}");
    assert!(
        stderr.contains("cannot write") && !stderr.contains("panicked"),
        "{stderr}"
    );
    // A reader that went away before reading anything (`| head -0`): nothing was
    // delivered, so 74, said (a reader that read some and left is success: see below).
    let mut child = dlock(&server)
        .args(["inspect", "--json", "held"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{stderr}");
    assert!(
        stderr.contains("before reading anything") && !stderr.contains("panicked"),
        "{stderr}"
    );
    // A watch whose reader went away (`--watch | head -2`) ends too, at its next refresh,
    // instead of redrawing into a closed pipe for ever.
    let mut child = dlock(&server)
        .args(["inspect", "--watch", "100ms", "held"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("inspect --watch kept running after its reader went away");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

/// Every subcommand that prints a result on stdout (with `--help`, `help`, `--version`),
/// given the token of a held lock "cfg" and a held lock "forced".
fn printing_commands(token: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["acquire", "taken"],
        vec!["acquire", "--json", "taken"],
        vec!["acquire", "--permits", "2", "taken-pool"],
        vec!["release", "--force", "forced"],
        vec!["leader", "jobs"],
        vec!["leader", "--json", "jobs"],
        vec!["leader", "--watch", "jobs"],
        vec!["guarded", "cfg", token, "SET", "k", "v"],
        vec!["guarded", "--commands"],
        vec!["inspect", "cfg"],
        vec!["inspect", "--json", "cfg"],
        vec!["inspect", "--prometheus", "cfg"],
        vec!["inspect", "--match", "*"],
        vec!["inspect", "--watch", "100ms", "cfg"],
        vec!["bench", "--quick"],
        vec!["completions", "bash"],
        vec!["man"],
        vec!["--help"],
        vec!["help", "run"],
        vec!["run", "--help"],
        vec!["--version"],
    ]
}

/// How `every_printing_subcommand_exits_74_when_its_result_cannot_be_written` gives a
/// command its standard output.
#[derive(Debug, Clone, Copy)]
enum Unwritable {
    /// Descriptor 1 closed (`>&-`).
    Closed,
    /// A pipe whose reader closed its end before the command started.
    ReaderGone,
}

/// Runs `command` with the standard output `how`, for at most 30 s: its exit code and
/// stderr.
fn run_unwritable(command: &mut Command, how: Unwritable) -> (Option<i32>, String) {
    command.stdin(Stdio::null()).stderr(Stdio::piped());
    match how {
        Unwritable::Closed => {
            command.stdout(Stdio::null());
            // SAFETY: closing fd 1 in the child before exec only affects the child.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(command, || {
                    libc::close(1);
                    Ok(())
                });
            }
        }
        Unwritable::ReaderGone => {
            command.stdout(reader_gone());
        }
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Holds `cfg` (its token returned, for the commands that name one) and `forced` (for
/// `release --force`), as the printing commands' table expects.
fn hold_cfg_and_forced(server: &RedisServer) -> String {
    let held = output(dlock(server).args(["acquire", "cfg"]));
    assert_eq!(held.status.code(), Some(0));
    let stdout = String::from_utf8(held.stdout).unwrap();
    let token = stdout.split_whitespace().next().unwrap().to_string();
    assert_eq!(code(dlock(server).args(["acquire", "forced"])), 0);
    token
}

/// Every subcommand that prints a result exits 74 when it cannot be delivered: standard
/// output closed, or a pipe whose reader left before reading anything. The list is every
/// subcommand of `dlock --help` that prints on stdout (and `--help`, `help`, `--version`,
/// whose text is what was asked for); those that print nothing there (`run`, `elect`,
/// `extend`, `release` by token) are unaffected. `acquire` leaves nothing held; `release
/// --force` with stdout closed releases nothing. `bench` is tried with stdout closed only:
/// with a reader gone it would run its whole measurement before writing.
#[test]
fn every_printing_subcommand_exits_74_when_its_result_cannot_be_written() {
    let server = RedisServer::start();
    let token = hold_cfg_and_forced(&server);
    let printing = printing_commands(&token);
    let mut wrong = Vec::new();
    for how in [Unwritable::Closed, Unwritable::ReaderGone] {
        for args in &printing {
            if matches!(how, Unwritable::ReaderGone) && args[0] == "bench" {
                continue;
            }
            let (code, stderr) = run_unwritable(dlock(&server).args(args), how);
            if code != Some(74) || stderr.contains("panicked") {
                wrong.push(format!("{how:?} {args:?}: exit {code:?}: {stderr}"));
            }
        }
        for taken in ["taken", "taken-pool"] {
            if server.cmd::<i64>(&["EXISTS", taken]) != 0 {
                wrong.push(format!("{how:?}: acquire left {taken} held"));
            }
        }
        // Closed: nothing released; a reader gone: released, the fence unread.
        let forced: i64 = server.cmd(&["EXISTS", "forced"]);
        if forced != matches!(how, Unwritable::Closed) as i64 {
            wrong.push(format!("{how:?}: release --force: forced exists {forced}"));
        }
    }
    assert!(wrong.is_empty(), "wrong:\n{}", wrong.join("\n"));
    // Commands that print nothing on stdout are unaffected by it.
    let silent: Vec<Vec<&str>> = vec![
        vec!["run", "job", "--", "true"],
        vec!["elect", "jobs", "--value", "v", "--", "true"],
        vec!["extend", "cfg", &token, "--ttl", "30s"],
        vec!["release", "cfg", &token],
    ];
    for how in [Unwritable::Closed, Unwritable::ReaderGone] {
        for args in &silent {
            if args[0] == "release" && matches!(how, Unwritable::Closed) {
                continue; // released in the last round only
            }
            let (code, stderr) = run_unwritable(dlock(&server).args(args), how);
            assert_eq!(code, Some(0), "{how:?} {args:?}: {stderr}");
        }
    }
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "cfg"]),
        0,
        "released by token"
    );
}

/// A read-write /dev/null on descriptor 1 is an open standard output, not a closed one:
/// what Python's `subprocess.DEVNULL`, Node's `stdio: 'ignore'`, daemon(3) and
/// `1<>/dev/null` give. Every printing subcommand does its work and exits 0 there (a
/// `--watch` keeps watching); `bench` is left out for the seconds it measures (it passes
/// the same stdout check as `acquire` and `inspect` before measuring).
#[test]
fn printing_subcommands_write_to_a_read_write_dev_null() {
    let server = RedisServer::start();
    let token = hold_cfg_and_forced(&server);
    let mut wrong = Vec::new();
    for args in printing_commands(&token) {
        if args[0] == "bench" {
            continue;
        }
        // Each acquire takes its lock afresh.
        let _: i64 = server.cmd(&["DEL", "taken", "taken-pool"]);
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap();
        let mut child = dlock(&server)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(null))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let watching = args.contains(&"--watch");
        let deadline = Instant::now() + Duration::from_secs(if watching { 2 } else { 30 });
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let still_running = child.try_wait().unwrap().is_none();
        if still_running {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if still_running != watching || (!watching && out.status.code() != Some(0)) {
            wrong.push(format!(
                "{args:?}: running {still_running}, exit {:?}: {stderr}",
                out.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "wrong:\n{}", wrong.join("\n"));
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "forced"]),
        0,
        "release --force"
    );
}

/// `--help`, `help run`, `run --help`, `--version` whose reader reads a little and leaves
/// (`| head -1`) exit 0, as any command's output does. The pipe is shrunk to one page,
/// smaller than the help texts, so that the reader always leaves while dlock still writes.
#[test]
fn help_and_version_exit_0_when_the_reader_leaves_after_reading_some() {
    use std::io::Read as _;
    use std::os::fd::AsRawFd as _;
    for args in [
        vec!["--help"],
        vec!["help", "run"],
        vec!["run", "--help"],
        vec!["--version"],
    ] {
        let (read, write) = pipe();
        // SAFETY: F_SETPIPE_SZ resizes the pipe just made.
        assert!(unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) } >= 4096);
        let child = Command::new(env!("CARGO_BIN_EXE_dlock"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = std::fs::File::from(read);
        let mut byte = [0u8; 1];
        assert_eq!(reader.read(&mut byte).unwrap(), 1, "{args:?}");
        drop(reader);
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn usage_errors_to_a_broken_stderr_exit_64_quietly() {
    for args in [
        &["acquire", "--bogus"][..],
        &["acquire", "x", "--ttl", "0s"],
        &["acquire", ""],
        // Nothing at all: the help, on stderr.
        &[],
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_dlock"))
            .env("DLOCK_REDIS", "redis://127.0.0.1:1")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(reader_gone())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(64), "{args:?}");
    }
}

/// Log lines (the warning of a forced release, -vv's debug lines) written to a broken
/// stderr change no exit code: the logger's own error report used to panic (101) after
/// the work was done.
#[test]
fn logs_to_a_broken_stderr_change_no_exit_code() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "forced"])), 0);
    for args in [
        &["release", "--force", "forced"][..],
        &["-vv", "acquire", "--ttl", "1s", "free"],
    ] {
        let status = dlock(&server)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(reader_gone())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}");
    }
    // The forced release was done.
    assert_eq!(server.cmd::<i64>(&["EXISTS", "forced"]), 0);
}

/// A pipe: its read end, then its write end.
fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd as _, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fresh descriptors, owned here from now on.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// The write end of a pipe whose reader is gone: writing to it fails with EPIPE.
fn reader_gone() -> Stdio {
    let (read, write) = pipe();
    drop(read);
    Stdio::from(write)
}

//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

/// The `dlock` binary pointed at `server` (no prefix from the environment).
pub fn dlock(server: &RedisServer) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
    command
        .env("DLOCK_REDIS", server.url())
        .env_remove("DLOCK_PREFIX");
    command
}

/// `text` with every run of whitespace made one space: help wraps at the terminal's
/// width, so a phrase may span lines.
pub fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn output(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().expect("run dlock")
}

pub fn code(command: &mut Command) -> i32 {
    output(command).status.code().expect("exited normally")
}

/// Waits for a pid file written by a child command and returns the pid.
pub fn wait_for_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

pub fn wait_until_dead(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

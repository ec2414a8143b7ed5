//! The `dlock` binary over several independent masters (`--redis` repeated: Redlock):
//! real redis-server processes from the test kit (dlock_testkit), some killed (by pid) mid-test; the
//! usage errors, exit codes, and mutual exclusion across OS processes. One test binary, a
//! module per topic; the helpers they share are here.

use std::process::{Command, Output, Stdio};

use dlock_testkit::RedisServer;

// The helpers shared with the CLI's other test binaries live beside them in
// `tests/common/`; a directory test reaches them only through a path.
#[path = "../common/mod.rs"]
mod common;

mod bench;
mod exclusion;
mod masters;
mod usage;

/// Nothing listens on these: what must fail before (or without) connecting.
const NOWHERE: [&str; 3] = [
    "redis://127.0.0.1:1",
    "redis://127.0.0.1:2",
    "redis://127.0.0.1:3",
];

/// The `dlock` binary with none of its variables from the test's environment.
fn dlock() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
    for var in [
        "DLOCK_REDIS",
        "DLOCK_CLUSTER",
        "DLOCK_SENTINEL",
        "DLOCK_SERVICE",
        "DLOCK_PREFIX",
        "DLOCK_REPLICAS",
        "DLOCK_REPLICA_TIMEOUT",
        "DLOCK_TLS_CA",
        "DLOCK_TLS_CERT",
        "DLOCK_TLS_KEY",
    ] {
        command.env_remove(var);
    }
    command
}

/// `dlock --redis URL ...` over the given URLs.
fn over(urls: &[String]) -> Command {
    let mut command = dlock();
    for url in urls {
        command.args(["--redis", url]);
    }
    command
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn three_masters() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

fn output(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().expect("run dlock")
}

/// Exit code, stdout and stderr.
fn run(command: &mut Command) -> (i32, String, String) {
    let out = output(command);
    (
        out.status.code().expect("exited normally"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The lock's key (the name: no prefix) on `server`, if any.
fn holder(server: &RedisServer, name: &str) -> Option<String> {
    server.cmd(&["GET", name])
}

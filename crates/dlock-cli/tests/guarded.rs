//! `dlock guarded` from shell scripts: commands on the lock's data that take effect only
//! while the hold is held, across OS processes; a late write after the lease exits 77 and
//! changes nothing; replies, JSON and the exit codes of bad input.

use std::process::Command;
use std::time::Duration;

use dlock_testkit::RedisServer;

mod common;
use common::{code, dlock, output};

fn stdout(command: &mut Command) -> String {
    let out = output(command);
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Four processes, each running `rounds` increments of `{counter}:data:n` as
/// `dlock run` commands that read with one `dlock guarded` and write with another, with a
/// pause between. `run_flags` picks the kind of hold. Returns the final count.
fn increment_through_guarded_writes(
    server: &RedisServer,
    run_flags: &[&str],
    rounds: usize,
) -> i64 {
    let bin = env!("CARGO_BIN_EXE_dlock");
    let script = format!(
        "n=$({bin} guarded \"$DLOCK_NAME\" \"$DLOCK_TOKEN\" {kind} GET n) && sleep 0.01 && \
         {bin} guarded \"$DLOCK_NAME\" \"$DLOCK_TOKEN\" {kind} SET n $((${{n:-0}} + 1)) >/dev/null",
        kind = run_flags.join(" ")
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let mut command = dlock(server);
            command.args(["run", "counter", "--ttl", "5s"]);
            command.args(run_flags);
            command.args(["--", "sh", "-c", &script]);
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let out = output(&mut command);
                    assert!(
                        out.status.success(),
                        "{:?}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    server.cmd::<i64>(&["GET", "{counter}:data:n"])
}

/// Under the mutex no increment is lost. The negative control runs the same commands
/// under a semaphore of 4 permits (each process holds one, so every guarded write is
/// allowed, but nothing excludes the others): increments are lost, so the count can see
/// a broken exclusion.
#[test]
fn processes_incrementing_through_guarded_writes_lose_nothing() {
    let server = RedisServer::start();
    assert_eq!(increment_through_guarded_writes(&server, &[], 8), 32);

    let control = RedisServer::start();
    let unexcluded = increment_through_guarded_writes(&control, &["--permits", "4"], 8);
    assert!(
        unexcluded < 32,
        "the unexcluded increments lost nothing ({unexcluded}): the count cannot catch a lost update"
    );
}

/// A token whose lease ended, after another process took the lock and wrote: its late
/// write exits 77 and the data keeps the successor's value.
#[test]
fn a_late_write_after_the_lease_exits_77_and_changes_nothing() {
    let server = RedisServer::start();
    let acquire = |ttl: &str| {
        let line = stdout(dlock(&server).args(["acquire", "job", "--ttl", ttl]));
        line.split_whitespace().next().unwrap().to_string()
    };
    let paused = acquire("300ms");
    assert_eq!(
        stdout(dlock(&server).args(["guarded", "job", &paused, "SET", "owner", "a"])),
        "OK\n"
    );
    std::thread::sleep(Duration::from_millis(500));
    let successor = acquire("10s");
    stdout(dlock(&server).args(["guarded", "job", &successor, "SET", "owner", "b"]));

    let late = output(dlock(&server).args(["guarded", "job", &paused, "SET", "owner", "late"]));
    assert_eq!(late.status.code(), Some(77));
    let said = String::from_utf8_lossy(&late.stderr);
    assert!(said.contains("no longer held"), "{said}");
    assert_eq!(server.cmd::<String>(&["GET", "{job}:data:owner"]), "b");
}

/// Replies print one value a line (nothing for a missing value), or as JSON; the kind
/// flag names how the token holds (a read hold here).
#[test]
fn replies_print_for_scripts_and_as_json() {
    let server = RedisServer::start();
    let line = stdout(dlock(&server).args(["acquire", "--read", "cfg"]));
    let token = line.split_whitespace().next().unwrap().to_string();
    let guarded = |args: &[&str]| {
        let mut command = dlock(&server);
        command
            .args(["guarded", "--read", "cfg", &token])
            .args(args);
        command
    };
    assert_eq!(
        stdout(&mut guarded(&["HSET", "h", "a", "1", "b", "two words"])),
        "2\n"
    );
    assert_eq!(
        stdout(&mut guarded(&["HGETALL", "h"])),
        "a\n1\nb\ntwo words\n"
    );
    assert_eq!(
        stdout(&mut guarded(&["--json", "HGETALL", "h"])),
        "[\"a\",\"1\",\"b\",\"two words\"]\n"
    );
    assert_eq!(stdout(&mut guarded(&["GET", "missing"])), "");
    assert_eq!(
        stdout(&mut guarded(&["--json", "GET", "missing"])),
        "null\n"
    );
    // A negative number is an argument, not a flag; lower case is the same command.
    assert_eq!(stdout(&mut guarded(&["incrby", "n", "-3"])), "-3\n");
    // A flag after the arguments is a flag, not a value written to the data; another
    // value that starts with '-' goes after `--`.
    assert_eq!(
        stdout(&mut guarded(&["RPUSH", "log", "one", "--json"])),
        "1\n"
    );
    assert_eq!(
        stdout(&mut guarded(&["RPUSH", "log", "--", "-x", "--json"])),
        "3\n"
    );
    assert_eq!(
        stdout(&mut guarded(&["--json", "LRANGE", "log", "0", "-1"])),
        "[\"one\",\"-x\",\"--json\"]\n"
    );
    assert_eq!(code(&mut guarded(&["SADD", "s", "-x"])), 64);
    // An array's missing values keep their lines.
    assert_eq!(
        stdout(&mut guarded(&["HMGET", "h", "a", "nope", "b"])),
        "1\n\ntwo words\n"
    );
    // Without the kind flag the token is looked for as a string hold, and the name holds
    // read holds: exit 65, and the hint names the kind flags.
    let wrong_kind = output(dlock(&server).args(["guarded", "cfg", &token, "GET", "n"]));
    assert_eq!(wrong_kind.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&wrong_kind.stderr).contains("--read"));
    // Nowhere to print the reply: nothing is applied (exit 74).
    let closed = guarded(&["SET", "never", "1"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(closed.code(), Some(0), "a null stdout is open");
    let mut closed = guarded(&["SET", "closed", "1"]);
    // SAFETY: closing fd 1 in the child before exec only affects the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut closed, || {
            libc::close(1);
            Ok(())
        });
    }
    assert_eq!(closed.status().unwrap().code(), Some(74));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "{cfg}:data:closed"]), 0);
}

/// Bad input is refused before any connection (exit 64, even with Redis down); a command
/// Redis refuses exits 76 and names it; several --redis masters are refused; the command
/// list needs no Redis.
#[test]
fn bad_input_and_refusals_have_their_exit_codes() {
    let server = RedisServer::start();
    let down = "redis://127.0.0.1:1";
    for args in [
        &["guarded", "job", "tok", "FLUSHALL", "x"][..],
        &["guarded", "job", "tok", "RENAME", "a", "b"],
        &["guarded", "job", "tok", "SET", "", "1"],
        &["guarded", "job", "two words", "GET", "x"],
        &["guarded", "job", "tok", "GET"],
        &["guarded", "job", "tok", "DEL", "a", "other-key"],
        &["guarded", "{t}:data:x", "tok", "GET", "a"],
        &["guarded", "job", "--permits", "0", "tok", "GET", "x"],
    ] {
        let out = output(
            Command::new(env!("CARGO_BIN_EXE_dlock"))
                .env("DLOCK_REDIS", down)
                .args(args),
        );
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
    }
    let listed = output(Command::new(env!("CARGO_BIN_EXE_dlock")).args(["guarded", "--commands"]));
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.lines().any(|l| l == "INCRBY") && !listed.contains("FLUSHALL"),
        "{listed}"
    );

    let line = stdout(dlock(&server).args(["acquire", "job"]));
    let token = line.split_whitespace().next().unwrap().to_string();
    stdout(dlock(&server).args(["guarded", "job", &token, "SET", "text", "abc"]));
    let refused = output(dlock(&server).args(["guarded", "job", &token, "INCRBY", "text", "1"]));
    assert_eq!(refused.status.code(), Some(76));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("INCRBY on {job}:data:text") && said.contains("not an integer"),
        "{said}"
    );

    let other = RedisServer::start();
    let redlock = output(
        Command::new(env!("CARGO_BIN_EXE_dlock"))
            .env_remove("DLOCK_REDIS")
            .args(["--redis", &server.url(), "--redis", &other.url()])
            .args(["--redis", down, "guarded", "job", &token, "GET", "text"]),
    );
    assert_eq!(redlock.status.code(), Some(64), "{redlock:?}");
    assert!(String::from_utf8_lossy(&redlock.stderr).contains("Redlock"));
}

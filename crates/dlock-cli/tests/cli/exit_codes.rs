//! Exit codes for bad input, bad state and a Redis that refuses or cannot be reached
//! (passwords never echoed), and TLS from the shell.

use std::process::Command;
use std::time::Duration;

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, flat, output};

#[test]
fn exit_codes_for_bad_input_and_bad_state() {
    let server = RedisServer::start();
    // 64: invalid arguments.
    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--ttl", "0s"])),
        64
    );
    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--ttl", "soon"])),
        64
    );
    assert_eq!(code(dlock(&server).args(["acquire", ""])), 64);
    // The prefix is part of the key: no control characters there either.
    assert_eq!(
        code(dlock(&server).args(["--prefix", "a\nb:", "run", "job", "--", "true"])),
        64
    );
    assert_eq!(
        server.cmd::<i64>(&["DBSIZE"]),
        0,
        "nothing taken under that prefix"
    );
    assert_eq!(code(dlock(&server).args(["run", "job"])), 64, "no command");
    assert_eq!(code(dlock(&server).args(["frobnicate"])), 64);
    assert_eq!(
        code(dlock(&server).args(["--redis", "nonsense", "acquire", "job"])),
        64
    );
    // 65: the key is not a lock.
    let _: i64 = server.cmd(&["LPUSH", "listkey", "x"]);
    let out = output(dlock(&server).args(["run", "listkey", "--", "true"]));
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listkey") && stderr.contains("hint:"),
        "{stderr}"
    );
    // The same from the kinds whose scripts raise their DLOCKTYPE error in the prelude, on
    // whatever server the run uses (Redis 6.2 answered them as a refusal, 76, until the
    // scripts returned their errors).
    let _: () = server.cmd(&["SET", "textkey", "x"]);
    for (name, kind, found) in [
        ("listkey", "--fair", "holds a Redis list"),
        ("textkey", "--permits=2", "holds a string"),
    ] {
        let out = output(dlock(&server).args(["run", name, kind, "--", "true"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{kind}: {stderr}");
        assert!(stderr.contains(found), "{kind}: {stderr}");
    }
    // 69: Redis unreachable.
    let mut gone = RedisServer::start();
    let url = gone.url();
    gone.kill9();
    let out = output(dlock(&server).args(["--redis", &url, "acquire", "job"]));
    assert_eq!(out.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DLOCK_REDIS"));
    // --help documents the codes and exits 0.
    let help = output(dlock(&server).args(["--help"]));
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for code in ["64", "65", "69", "70", "75", "77"] {
        assert!(text.contains(code), "--help lists exit code {code}");
    }
}

/// `release` and `extend` without a kind flag look the kind up: a wrong type then means
/// data that is no lock, and the hint says so rather than advise a kind flag; with a flag
/// the hint names both readings. Nothing of the data is touched either way.
#[test]
fn a_release_on_data_that_is_no_lock_says_so_and_changes_nothing() {
    let server = RedisServer::start();
    let _: i64 = server.cmd(&["LPUSH", "listkey", "x"]);
    let _: () = server.cmd(&["SET", "textkey", "x"]);
    for args in [
        &["release", "listkey", "tok"][..],
        &["release", "textkey", "tok"],
        &["extend", "listkey", "tok", "--ttl", "10s"],
    ] {
        let out = output(dlock(&server).args(args));
        let stderr = flat(&String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(65), "{args:?}: {stderr}");
        assert!(
            stderr.contains("hint: the name holds what release and extend cannot act on by token"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("kind flag"), "{args:?}: {stderr}");
    }
    let out = output(dlock(&server).args(["release", "--fair", "listkey", "tok"]));
    let stderr = flat(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(65), "{stderr}");
    assert!(
        stderr.contains("another kind of lock than the flag says, or data that is not a lock"),
        "{stderr}"
    );
    assert_eq!(
        server.cmd::<Vec<String>>(&["LRANGE", "listkey", "0", "-1"]),
        ["x"]
    );
    assert_eq!(server.cmd::<String>(&["GET", "textkey"]), "x");
}

/// No subcommand: with nothing on the command line the help, exit 64, whether or not a
/// DLOCK_* variable is set (clap counts one as an argument); with options but no
/// subcommand an error naming only the subcommands `--help` lists, never the hidden
/// watchdog's.
#[test]
fn a_missing_subcommand_reads_the_same_whatever_the_environment() {
    let server = RedisServer::start();
    let bare_with_env = output(&mut dlock(&server));
    let bare_without = output(Command::new(env!("CARGO_BIN_EXE_dlock")).env_remove("DLOCK_REDIS"));
    for out in [&bare_with_env, &bare_without] {
        assert_eq!(out.status.code(), Some(64));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("Usage: dlock [OPTIONS] <COMMAND>"),
            "{stderr}"
        );
        assert!(stderr.contains("EXIT CODES:"), "{stderr}");
        assert!(!stderr.contains("__watch-group"), "{stderr}");
    }
    assert_eq!(bare_with_env.stderr, bare_without.stderr);
    let out = output(dlock(&server).args(["--prefix", "x:"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("a subcommand is required: run, acquire"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    assert!(!stderr.contains("__watch-group"), "{stderr}");
}

#[test]
fn tls_from_the_shell() {
    let tls = dlock_testkit::RedisServer::start_with(dlock_testkit::ServerOptions::tls());
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, tls.ca_pem()).unwrap();
    let ca = ca.display().to_string();
    assert_eq!(
        code(dlock(&tls).args(["--tls-ca", &ca, "run", "job", "--", "true"])),
        0
    );
    assert_eq!(
        code(dlock(&tls).args(["run", "job", "--", "true"])),
        69,
        "untrusted certificate"
    );
    assert_eq!(
        code(dlock(&tls).args(["--tls-ca", "/no/such.pem", "run", "job", "--", "true"])),
        64
    );
}

#[test]
fn refusals_by_redis() {
    // 76: Redis refuses the request (an ACL user without script permissions).
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "reader", "on", ">pw", "~*", "&*", "+@read",
    ]);
    let url = format!("redis://reader:pw@127.0.0.1:{}", server.port());
    let out = output(dlock(&server).args(["--redis", &url, "acquire", "job"]));
    assert_eq!(out.status.code(), Some(76));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NOPERM"), "the server's words: {stderr}");
    assert!(stderr.contains("hint:"));

    // Wrong credentials: refused, not "unreachable", and the password is not echoed.
    let url = format!("redis://reader:wrong-secret@127.0.0.1:{}", server.port());
    let out = output(dlock(&server).args(["--redis", &url, "acquire", "job"]));
    assert_eq!(out.status.code(), Some(76));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("credentials"), "{stderr}");
    assert!(!stderr.contains("wrong-secret"), "{stderr}");

    // A file that is not a certificate is refused before connecting.
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate").unwrap();
    let bogus = bogus.display().to_string();
    let tls_url = format!("rediss://127.0.0.1:{}", server.port());
    assert_eq!(
        code(
            dlock(&server)
                .args(["--redis", &tls_url, "--tls-ca", &bogus, "run", "job", "--", "true"])
        ),
        64
    );

    // A rediss:// URL to a plain port fails at once and says TLS.
    let plain = format!("rediss://127.0.0.1:{}", server.port());
    let started = std::time::Instant::now();
    let out = output(dlock(&server).args(["--redis", &plain, "acquire", "job"]));
    assert_eq!(out.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS"));
    assert!(started.elapsed() < Duration::from_secs(5));

    // Another kind on the name: exit 65, naming what holds it, advising no deletion.
    let _: () = server.cmd(&[
        "HSET",
        "job",
        "~kind",
        "semaphore",
        "h:x",
        "99999999999999|1",
    ]);
    let out = output(dlock(&server).args(["acquire", "job", "--no-wait"]));
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("semaphore"), "{stderr}");
    assert!(
        !stderr.contains("remove") && !stderr.contains("delete"),
        "{stderr}"
    );
}

#[test]
fn unreachable_redis_is_named_without_its_password() {
    let mut gone = RedisServer::start();
    let port = gone.port();
    gone.kill9();
    let url = format!("redis://user:s3cret@127.0.0.1:{port}");
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_dlock"))
            .env("DLOCK_REDIS", &url)
            .args(["acquire", "job"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains(&format!("redis://user:***@127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

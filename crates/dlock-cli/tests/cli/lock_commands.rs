//! `acquire`, `release` and `extend` from a shell: tokens, leases, kinds, what is not a
//! lock, a full semaphore, a zero TTL, and an interrupted wait.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, output};

#[test]
fn acquire_release_and_extend_from_a_shell() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args(["acquire", "job", "--ttl", "10s", "--json"]));
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["name"], "job");
    assert_eq!(json["ttl_ms"], 10_000);
    // The fence has the clock floor: at least the server's clock in µs (after 2020).
    assert!(
        json["fence"].as_u64().unwrap() > 1_577_836_800_000_000,
        "{json}"
    );
    let token = json["token"].as_str().unwrap().to_string();
    let stored: String = server.cmd(&["GET", "job"]);
    assert_eq!(stored, token, "left held after dlock exited");

    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--no-wait"])),
        75
    );
    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--wait", "200ms"])),
        75
    );
    assert_eq!(
        code(dlock(&server).args(["extend", "job", &token, "--ttl", "60s"])),
        0
    );
    let pttl: i64 = server.cmd(&["PTTL", "job"]);
    assert!(pttl > 50_000);
    assert_eq!(
        code(dlock(&server).args(["release", "job", "not-the-token"])),
        77
    );
    assert_eq!(code(dlock(&server).args(["release", "job", &token])), 0);
    assert_eq!(
        code(dlock(&server).args(["release", "job", &token])),
        77,
        "second release"
    );
    assert_eq!(
        code(dlock(&server).args(["extend", "job", &token, "--ttl", "5s"])),
        77
    );

    let plain = output(dlock(&server).args(["acquire", "job"]));
    let text = String::from_utf8(plain.stdout).unwrap();
    let parts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(parts.len(), 2, "TOKEN FENCE");
    let (first, second): (u64, u64) = (json["fence"].as_u64().unwrap(), parts[1].parse().unwrap());
    assert!(second > first, "the fence grows: {first} then {second}");
}

#[test]
fn an_abandoned_cli_lock_frees_after_its_lease() {
    let server = RedisServer::start();
    assert_eq!(
        code(dlock(&server).args(["acquire", "job", "--ttl", "700ms"])),
        0
    );
    let started = Instant::now();
    assert_eq!(
        code(dlock(&server).args(["run", "job", "--wait", "10s", "--", "true"])),
        0
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_string_without_an_expiry_is_not_a_lock() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["SET", "plain", "hello"]);
    for kind in [&[][..], &["--read"], &["--write"], &["--fair"]] {
        let out = output(dlock(&server).args(["acquire", "plain", "-n"]).args(kind));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{kind:?}: {stderr}");
        assert!(stderr.contains("not a dlock lock"), "{stderr}");
    }
    // `run` waits forever by default: it must say so at once instead, as every kind, and
    // as a multi-lock with the plain key among its names (the other one free).
    let runs: [&[&str]; 5] = [
        &[],
        &["--read"],
        &["--write"],
        &["--fair"],
        &["--also", "free"],
    ];
    for kind in runs {
        let child = dlock(&server)
            .args(["run", "plain"])
            .args(kind)
            .args(["--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = refused_at_once(child, kind);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{kind:?}: {stderr}");
        assert!(stderr.contains("not a dlock lock"), "{kind:?}: {stderr}");
    }
    // A token given back or extended there is no lost hold (77) either: no lock was there.
    for verb in [&["release"][..], &["extend", "--ttl", "10s"]] {
        let out = output(dlock(&server).args(verb).args(["plain", "mytoken"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{verb:?}: {stderr}");
        assert!(stderr.contains("not a dlock lock"), "{verb:?}: {stderr}");
    }
    assert_eq!(server.cmd::<i64>(&["EXISTS", "free"]), 0, "nothing taken");
    let stored: String = server.cmd(&["GET", "plain"]);
    assert_eq!(stored, "hello", "nothing was changed");
    // Another client's lock with a lease is still a busy lock, and a token not its own
    // there is a lost hold.
    let _: () = server.cmd(&["SET", "leased", "theirs", "PX", "60000"]);
    assert_eq!(code(dlock(&server).args(["acquire", "leased", "-n"])), 75);
    assert_eq!(
        code(dlock(&server).args(["release", "leased", "mytoken"])),
        77
    );
}

#[test]
fn a_full_semaphore_says_all_its_permits_are_held() {
    let server = RedisServer::start();
    for _ in 0..2 {
        assert_eq!(
            code(dlock(&server).args(["acquire", "gpu", "--permits", "2"])),
            0
        );
    }
    for wait in [&["-n"][..], &["--wait", "200ms"]] {
        let out = output(
            dlock(&server)
                .args(["acquire", "gpu", "--permits", "2"])
                .args(wait),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "{stderr}");
        assert!(stderr.contains("all 2 permits are held"), "{stderr}");
        assert!(!stderr.contains("another owner"), "{stderr}");
    }
}

#[test]
fn a_zero_ttl_is_worded_once_and_echoed_as_written() {
    let run = |ttl: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
            .env("DLOCK_REDIS", "redis://127.0.0.1:1")
            .args(["acquire", "x", "--ttl", ttl])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64));
        String::from_utf8(out.stderr).unwrap()
    };
    for ttl in ["0", "0s", "0h", "25h"] {
        let stderr = run(ttl);
        assert!(stderr.contains(&format!("'{ttl}'")), "{stderr}");
        assert!(stderr.contains("out of range; use 10ms to 24h"), "{stderr}");
        assert!(
            !stderr.contains("'0ms'") && !stderr.contains(" 0ms "),
            "{stderr}"
        );
    }
}

#[test]
fn a_token_released_as_the_wrong_kind_is_65_and_its_own_kind_needs_no_flag() {
    let server = RedisServer::start();
    let token = |args: &[&str]| {
        let out = output(dlock(&server).args(args));
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string()
    };
    let mutex = token(&["acquire", "m"]);
    for flag in ["--read", "--permits"] {
        let mut args = vec!["release", "m", &mutex, flag];
        if flag == "--permits" {
            args.push("2");
        }
        let out = output(dlock(&server).args(&args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{flag}: {stderr}");
    }
    let reader = token(&["acquire", "rw", "--read"]);
    assert_eq!(
        code(dlock(&server).args(["release", "rw", &reader, "--write"])),
        65
    );
    // The hold says which kind it is: no flag needed.
    assert_eq!(code(dlock(&server).args(["release", "rw", &reader])), 0);
    let permit = token(&["acquire", "sem", "--permits", "3"]);
    assert_eq!(
        code(dlock(&server).args(["extend", "sem", &permit, "--ttl", "10s"])),
        0
    );
    assert_eq!(code(dlock(&server).args(["release", "sem", &permit])), 0);
    assert_eq!(
        code(dlock(&server).args(["release", "sem", &permit])),
        77,
        "gone"
    );
    assert_eq!(code(dlock(&server).args(["release", "m", &mutex])), 0);
}

#[test]
fn an_interrupted_wait_says_so_in_one_line() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
    use std::os::unix::process::ExitStatusExt;
    // SIGTERM (a supervisor's stop: exit 143) and SIGINT (Ctrl-C: dlock ends by the
    // signal itself, as a shell expects of a program interrupted at the terminal).
    for signal in [libc::SIGTERM, libc::SIGINT] {
        for command in [&["acquire", "job"][..], &["run", "job", "--", "true"]] {
            listening_on(&server, false);
            let child = dlock(&server)
                .args(command)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // Signalled once it waits (it listens for the release), not before: a slow
            // start on a loaded machine must not look like a second line.
            listening_on(&server, true);
            // SAFETY: signalling the dlock process this test spawned.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let ended =
                out.status.code() == Some(128 + signal) || out.status.signal() == Some(signal);
            assert!(ended, "{command:?}: {:?} {stderr}", out.status);
            assert_eq!(stderr.lines().count(), 1, "{command:?}: {stderr}");
            assert!(stderr.contains("interrupted"), "{stderr}");
        }
    }
}

/// Waits (10 s at most) until some client listens on a channel of `server`, or none does.
fn listening_on(server: &RedisServer, listening: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS"]);
        if channels.is_empty() != listening {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "listening: {channels:?}, wanted {listening}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A day is a unit (`--skip-if-ran-within 1d`, cron's interval), within the library's
/// limits as every other unit is; the help says which units there are.
#[test]
fn durations_take_days_within_the_library_limits() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args(["acquire", "daily", "--ttl", "1d", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["ttl_ms"], 86_400_000);
    for (flag, value, range) in [
        ("--ttl", "2d", "use 10ms to 24h"),
        ("--ttl", "1d1ms", "use 10ms to 24h"),
        ("--waiter-lease", "1d1s", "use 100ms to 24h"),
    ] {
        let out = output(dlock(&server).args(["acquire", "x", "--fair", flag, value]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(&format!("'{value}'")) && stderr.contains(range),
            "{stderr}"
        );
    }
    // The recipe: run once a day, whichever replica's cron fires first.
    let recipe = [
        "run",
        "report",
        "-n",
        "--skip-if-ran-within",
        "1d",
        "--",
        "true",
    ];
    assert_eq!(code(dlock(&server).args(recipe)), 0);
    assert_eq!(code(dlock(&server).args(recipe)), 75, "ran within the day");
    let out =
        output(dlock(&server).args(["run", "r", "--skip-if-ran-within", "366d", "--", "true"]));
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range; use 1ms to 8760h"));
    // A unit it does not know names the ones it does.
    let out = output(dlock(&server).args(["acquire", "x", "--wait", "1w"]));
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ms, s, m, h or d"));
    let help = output(dlock(&server).args(["acquire", "--help"]));
    assert!(
        crate::common::flat(&String::from_utf8_lossy(&help.stdout)).contains("ms, s, m, h or d")
    );
}

/// What a key holds, in words: Redis's own types by their names, and what a forced release
/// needs ("a lock of any dlock kind"), never "a value of type ...".
#[test]
fn a_key_of_another_type_is_named_in_words() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["RPUSH", "alist", "a"]);
    let _: () = server.cmd(&["ZADD", "azset", "1", "a"]);
    for (args, words) in [
        (
            &["release", "--force", "alist"][..],
            "holds a Redis list, not a lock of any dlock kind",
        ),
        (
            &["acquire", "azset", "--read"],
            "holds a Redis sorted set, not a dlock read-write lock",
        ),
        (
            &["acquire", "alist", "--write"],
            "holds a Redis list, not a dlock read-write lock",
        ),
    ] {
        let out = output(dlock(&server).args(args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {stderr}");
        assert!(stderr.contains(words), "{args:?}: {stderr}");
        assert!(!stderr.contains("of type"), "{stderr}");
    }
}

/// `acquire --json`'s `kind` is the kind of lock taken (mutex, fair, write, ...), which
/// `inspect` cannot tell apart (all hold the key exclusively); both print `hold`, how the
/// key is held, in the same words, so a script can match one against the other.
#[test]
fn acquire_and_inspect_json_name_the_hold_alike() {
    let server = RedisServer::start();
    for (name, flags, kind, hold) in [
        ("m", &[][..], "mutex", "exclusive"),
        ("f", &["--fair"], "fair", "exclusive"),
        ("w", &["--write"], "write", "exclusive"),
        ("r", &["--read"], "read", "read"),
        ("s", &["--permits", "3"], "semaphore", "semaphore"),
    ] {
        let out = output(dlock(&server).args(["acquire", name, "--json"]).args(flags));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let acquired: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(acquired["kind"], kind, "{acquired}");
        assert_eq!(acquired["hold"], hold, "{acquired}");
        let out = output(dlock(&server).args(["inspect", name, "--json"]));
        let inspected: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(inspected["hold"], hold, "{inspected}");
        assert_eq!(
            inspected["kind"], hold,
            "inspect's kind is unchanged: {inspected}"
        );
    }
}

/// A forced release says so in one line: the library's log event of it (a WARN for
/// applications) is left out unless -v asks for more, and with -v it is there (so the
/// one line is the filter's doing, not an event that no longer exists).
#[test]
fn a_forced_release_says_so_once() {
    let server = RedisServer::start();
    for (verbose, lines) in [(false, 1), (true, 2)] {
        assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
        let mut command = dlock(&server);
        command.env_remove("RUST_LOG");
        if verbose {
            command.arg("-v");
        }
        let out = output(command.args(["release", "--force", "job"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(stderr.lines().count(), lines, "-v {verbose}: {stderr}");
        assert!(stderr.contains("released \"job\" by force"), "{stderr}");
        assert_eq!(stderr.contains("WARN"), verbose, "{stderr}");
    }
}

/// The output of `child`, which must end within 10 s (killed and failed otherwise): a
/// wait that never ends is the defect.
fn refused_at_once(mut child: std::process::Child, what: &[&str]) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("dlock run {what:?} waited on a key that is no lock");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The first grant reply of a fair mutex's attempt (its script's `{1, fence, ...}`).
fn is_fair_grant(reply: &[u8]) -> bool {
    reply.starts_with(b"*2\r\n:1\r\n:") || reply.starts_with(b"*3\r\n:1\r\n:")
}

/// `run` looks once before it waits (to tell a string without an expiry at once): a
/// transient error on that look (here the attempt's reply lost with its connection, twice,
/// so its own resend fails too) is retried by the wait, not an exit 69.
#[test]
fn a_wait_retries_a_first_look_that_met_a_dropped_connection() {
    let server = RedisServer::start();
    for (wait, expected) in [("--wait", 0), ("--no-wait", 69)] {
        let name = format!("look{wait}");
        let proxy = dlock_testkit::Proxy::start(server.port());
        proxy.drop_next_replies_where(2, is_fair_grant);
        let mut command = dlock(&server);
        command
            .env("DLOCK_REDIS", proxy.url())
            .args(["run", &name, "--fair", wait]);
        if wait == "--wait" {
            command.arg("10s");
        }
        let out = output(command.args(["--", "true"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The negative control (one attempt, no wait) shows the replies were lost.
        assert_eq!(out.status.code(), Some(expected), "{wait}: {stderr}");
        assert_eq!(proxy.dropped(), 2, "{wait}: {stderr}");
        assert_eq!(
            server.cmd::<i64>(&["EXISTS", &name]),
            0,
            "{wait}: nothing left held"
        );
    }
}

//! The `dlock` binary against real redis-server processes: exit codes, the child's
//! environment, signals, and mutual exclusion across OS processes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

mod common;
use common::{alive, code, dlock, output, wait_for_pid, wait_until_dead};

/// Four shell loops, each doing `rounds` read-sleep-write increments of a counter file,
/// through `dlock run` when `locked`. Returns the final count.
fn increment_from_processes(server: &RedisServer, dir: &Path, locked: bool, rounds: usize) -> u64 {
    let counter = dir.join("counter");
    std::fs::write(&counter, "0").unwrap();
    let rmw = format!(
        "v=$(cat {c}); sleep 0.01; echo $((v+1)) > {c}.$$ && mv {c}.$$ {c}",
        c = counter.display()
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let mut command = if locked {
                let mut c = dlock(server);
                c.args(["run", "counter", "--ttl", "5s", "--", "sh", "-c", &rmw]);
                c
            } else {
                let mut c = Command::new("sh");
                c.args(["-c", &rmw]);
                c
            };
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    assert_eq!(command.status().unwrap().code(), Some(0));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn processes_running_under_the_lock_never_lose_an_update() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(increment_from_processes(&server, dir.path(), true, 12), 48);
}

#[test]
fn negative_control_processes_without_the_lock_lose_updates() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert!(increment_from_processes(&server, dir.path(), false, 12) < 48);
}

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
    assert!(String::from_utf8_lossy(&out.stderr).contains("lost the lock"));
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

/// Six processes, four rounds each, share a 2-permit semaphore through `dlock run
/// --permits 2` (or run unguarded). Each holder counts the holders present while it
/// holds; returns the largest count seen.
fn most_holders_across_processes(server: &RedisServer, dir: &Path, guarded: bool) -> usize {
    let holders = dir.join("holders");
    std::fs::create_dir_all(&holders).unwrap();
    let log = dir.join("counts");
    let script = format!(
        "touch {h}/$$; ls {h} | wc -l >> {log}; sleep 0.05; rm {h}/$$",
        h = holders.display(),
        log = log.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let mut command = if guarded {
                let mut c = dlock(server);
                c.args([
                    "run",
                    "pool",
                    "--permits",
                    "2",
                    "--ttl",
                    "5s",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ]);
                c
            } else {
                let mut c = Command::new("sh");
                c.args(["-c", &script]);
                c
            };
            std::thread::spawn(move || {
                for _ in 0..4 {
                    assert_eq!(command.status().unwrap().code(), Some(0));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let counts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(counts.lines().count(), 24);
    counts
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap()
}

#[test]
fn a_semaphore_across_processes_admits_n_and_never_more() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(most_holders_across_processes(&server, dir.path(), true), 2);
}

#[test]
fn negative_control_unguarded_processes_exceed_n() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert!(most_holders_across_processes(&server, dir.path(), false) > 2);
}

/// Readers and writers in separate processes check each other through marker files: a
/// writer fails (exit 98/99) if it meets a reader or writer, a reader (exit 97) if it meets
/// a writer. Returns the exit codes and the most readers one reader saw at once.
fn rwlock_across_processes(server: &RedisServer, dir: &Path, guarded: bool) -> (Vec<i32>, usize) {
    let (readers, writer, log) = (dir.join("r"), dir.join("w"), dir.join("seen"));
    std::fs::create_dir_all(&readers).unwrap();
    let write = format!(
        "mkdir {w} 2>/dev/null || exit 99; [ -z \"$(ls {r})\" ] || exit 98; sleep 0.03; rmdir {w}",
        w = writer.display(),
        r = readers.display()
    );
    let read = format!(
        "touch {r}/$$; [ -d {w} ] && exit 97; ls {r} | wc -l >> {log}; sleep 0.03; rm {r}/$$",
        w = writer.display(),
        r = readers.display(),
        log = log.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let (flag, script) = if i % 3 == 0 {
                ("--write", write.clone())
            } else {
                ("--read", read.clone())
            };
            let mut command = if guarded {
                let mut c = dlock(server);
                c.args([
                    "run", "config", flag, "--ttl", "5s", "--", "sh", "-c", &script,
                ]);
                c
            } else {
                let mut c = Command::new("sh");
                c.args(["-c", &script]);
                c
            };
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| command.status().unwrap().code().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let codes: Vec<i32> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let most_readers = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    (codes, most_readers)
}

#[test]
fn rwlock_across_processes_never_lets_a_writer_overlap() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (codes, most_readers) = rwlock_across_processes(&server, dir.path(), true);
    assert!(
        codes.iter().all(|&c| c == 0),
        "an overlap was seen: {codes:?}"
    );
    assert!(
        most_readers >= 2,
        "readers did overlap each other ({most_readers})"
    );
}

#[test]
fn negative_control_unguarded_readers_and_writers_collide() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (codes, _) = rwlock_across_processes(&server, dir.path(), false);
    assert!(
        codes.iter().any(|&c| c != 0),
        "the marker check never fired: {codes:?}"
    );
}

#[test]
fn run_with_fair_read_write_and_permits() {
    let server = RedisServer::start();
    for flags in [
        &["--fair"][..],
        &["--read"],
        &["--write"],
        &["--permits", "3"],
    ] {
        let mut args = vec!["run", "kinds"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[
            "--",
            "sh",
            "-c",
            "test -n \"$DLOCK_TOKEN\" && test \"$DLOCK_FENCE\" -gt 0",
        ]);
        assert_eq!(code(dlock(&server).args(&args)), 0, "{flags:?}");
    }
    // Held by a writer: a reader and another writer are busy (75).
    let mut writer = dlock(&server)
        .args(["run", "config", "--write", "--", "sleep", "2"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cmd::<Option<String>>(&["GET", "config"]).is_none() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        code(dlock(&server).args(["run", "config", "--read", "--no-wait", "--", "true"])),
        75
    );
    assert_eq!(
        code(dlock(&server).args(["run", "config", "--write", "--wait", "200ms", "--", "true"])),
        75
    );
    assert_eq!(writer.wait().unwrap().code(), Some(0));
    assert_eq!(
        code(dlock(&server).args(["run", "kinds", "--permits", "0", "--", "true"])),
        64
    );
    assert_eq!(
        code(dlock(&server).args(["run", "kinds", "--read", "--write", "--", "true"])),
        64
    );
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
fn bench_reports_every_scenario_with_its_baseline() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args([
        "bench",
        "--duration",
        "300ms",
        "--renew-locks",
        "300",
        "--json",
    ]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One JSON object per scenario: scenario, value, unit, baseline, ratio, own fields.
    let report: std::collections::HashMap<String, serde_json::Value> =
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                (row["scenario"].as_str().unwrap().to_string(), row)
            })
            .collect();
    for scenario in ["seq", "par", "rwlock_read"] {
        assert!(report[scenario]["value"].as_f64().unwrap() > 0.0);
        assert!(report[scenario]["baseline"].as_f64().unwrap() > 0.0);
        assert!(report[scenario]["ratio"].as_f64().unwrap() > 0.0);
        assert_eq!(report[scenario]["unit"], "cycles/s");
    }
    let per_worker: Vec<u64> =
        serde_json::from_value(report["handoff_fair"]["per_worker"].clone()).unwrap();
    assert_eq!(per_worker.len(), 4);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "every worker got the fair lock"
    );
    let busy = report["handoff"]["busy_fraction"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "busy fraction {busy}");
    assert!(report["rwlock_writer"]["value"].as_f64().unwrap() > 0.0);
    let herd = report["herd"]["value"].as_f64().unwrap();
    let herd_fair = report["herd_fair"]["value"].as_f64().unwrap();
    // A release wakes one waiter of the client: a few commands per hand-off, not one
    // attempt per waiter.
    assert!(herd <= 10.0, "plain mutex: {herd} commands per hand-off");
    assert!(
        herd_fair <= 40.0,
        "fair mutex: {herd_fair} commands per hand-off"
    );
    assert!(
        report["renew"]["ratio"].as_f64().unwrap() < 0.5,
        "renewal is batched"
    );
    // One server: no masters for redlock, and the run says so.
    assert!(!report.contains_key("redlock"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("redlock scenario") && stderr.contains("--spawn"),
        "{stderr}"
    );
}

#[test]
#[cfg_attr(
    not(feature = "spawn"),
    ignore = "bench --spawn needs the `spawn` feature (scripts/test.sh turns it on)"
)]
fn bench_spawn_measures_a_private_server_of_its_own() {
    // --redis points nowhere: with --spawn the bench must not need it.
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env("DLOCK_REDIS", "redis://127.0.0.1:1")
        .args([
            "bench",
            "--spawn",
            "--quick",
            "--renew-locks",
            "100",
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let scenarios: Vec<&str> = rows
        .iter()
        .map(|row| row["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        scenarios,
        [
            "seq",
            "hold_at_least",
            "skip_if_ran",
            "lock_delay",
            "multi",
            "par",
            "par_fenced",
            "handoff",
            "handoff_fair",
            "herd",
            "herd_fair",
            "rwlock_read",
            "rwlock_writer",
            "rwlock_read_scale",
            "semaphore_scale",
            "semaphore_weighted",
            "renew",
            "redlock",
            "redlock_herd"
        ]
    );
    // The scale scenarios: the server's time per cycle at each number of holders.
    let scales = rows.iter().filter(|row| {
        (row["scenario"].as_str()).is_some_and(|scenario| scenario.ends_with("_scale"))
    });
    for scale in scales {
        for holders in ["8", "64", "1024"] {
            let us = scale["server_us_at"][holders].as_f64().unwrap_or(0.0);
            assert!(us > 0.0, "{holders} holders: {scale}");
        }
    }
    // multi: a two-name multi-lock against the two names taken as plain mutexes.
    let multi = rows.iter().find(|row| row["scenario"] == "multi").unwrap();
    assert!(multi["value"].as_f64().unwrap() > 0.0, "{multi}");
    assert!(multi["baseline"].as_f64().unwrap() > 0.0, "{multi}");
    // redlock: five private masters against the first alone, both measured.
    let redlock = &rows[rows.len() - 2];
    assert_eq!(redlock["masters"], 5, "{redlock}");
    assert!(redlock["value"].as_f64().unwrap() > 0.0, "{redlock}");
    assert!(redlock["baseline"].as_f64().unwrap() > 0.0, "{redlock}");
    // redlock_herd: hand-offs among 8 waiters over the same five masters.
    let herd = rows.last().unwrap();
    assert_eq!(herd["masters"], 5, "{herd}");
    assert!(
        herd["rounds_per_handoff"].as_f64().unwrap() >= 1.0,
        "{herd}"
    );
}

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

/// `dlock completions SHELL` and `dlock man` come from the clap definitions, need no Redis
/// (the URL here reaches nothing), and work: bash completes a subcommand and its flags from
/// the generated script; the man page renders the command and its subcommands; pages
/// written to a directory that does not exist are an I/O error (74), said.
#[test]
fn completions_and_man_pages_are_generated_without_redis() {
    let offline = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
        command.env("DLOCK_REDIS", "redis://127.0.0.1:1");
        command
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("dlock.bash");
    let out = output(offline().args(["completions", "bash"]));
    assert_eq!(out.status.code(), Some(0));
    std::fs::write(&script, &out.stdout).unwrap();
    let complete = |words: &str| {
        let probe = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _dlock dlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; echo \"${{COMPREPLY[*]}}\"",
            script.display()
        );
        let out = output(Command::new("bash").args(["-c", &probe]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let subcommands = complete("dlock ru");
    assert!(
        subcommands.split_whitespace().any(|w| w == "run"),
        "{subcommands}"
    );
    let flags = complete("dlock run job --wai");
    assert!(
        flags.split_whitespace().any(|w| w == "--waiter-lease"),
        "{flags}"
    );
    // Negative control: the probe does not complete whatever it is given.
    let nothing = complete("dlock zzz");
    assert!(!nothing.contains("run"), "{nothing}");
    for shell in ["zsh", "fish"] {
        let out = output(offline().args(["completions", shell]));
        assert_eq!(out.status.code(), Some(0), "{shell}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("waiter-lease"),
            "{shell}"
        );
    }
    assert_eq!(code(offline().args(["completions", "tcsh"])), 64);

    let out = output(offline().arg("man"));
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH dlock 1"), "{page}");
    assert!(page.contains("inspect"), "{page}");
    let pages = dir.path().join("man1");
    std::fs::create_dir(&pages).unwrap();
    let out = output(offline().args(["man", "--out-dir"]).arg(&pages));
    assert_eq!(out.status.code(), Some(0));
    let run_page = std::fs::read_to_string(pages.join("dlock-run.1")).unwrap();
    assert!(run_page.contains("waiter"), "{run_page}");
    assert!(
        !pages.join("dlock-__watch-group.1").exists(),
        "internal commands have no page"
    );
    let out = output(
        offline()
            .args(["man", "--out-dir"])
            .arg(dir.path().join("missing")),
    );
    assert_eq!(out.status.code(), Some(74));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the manual pages"));
}

/// A key that is not UTF-8 among dlock's locks is no lock's (dlock writes none such): the
/// scan of `inspect --match` skips it, and `-v` says how many it skipped. Before, one such
/// key made `inspect --match`, `--json` and `--prometheus` exit 76 and list nothing.
#[test]
fn a_key_that_is_not_utf8_is_skipped_by_inspect_match() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "odd:job"])), 0);
    assert_eq!(
        code(dlock(&server).args(["acquire", "odd:pool", "--permits", "2"])),
        0
    );
    let _: () = redis::cmd("SET")
        .arg(&b"odd:bin\xff"[..])
        .arg("x")
        .query(&mut server.connection())
        .unwrap();
    for view in [&[][..], &["--json"], &["--prometheus"]] {
        let out = output(
            dlock(&server)
                .args(["inspect", "--match", "odd:*"])
                .args(view)
                .env_remove("RUST_LOG"),
        );
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{view:?}: {stderr}");
        assert!(
            stdout.contains("odd:job") && stdout.contains("odd:pool"),
            "{view:?}: {stdout}"
        );
        assert!(!stdout.contains("odd:bin"), "{view:?}: {stdout}");
        assert!(
            !stderr.contains("skipped"),
            "{view:?}: said without -v: {stderr}"
        );
    }
    let out = output(
        dlock(&server)
            .args(["-v", "inspect", "--match", "odd:*"])
            .env_remove("RUST_LOG"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("skipped 1 key"), "{stderr}");
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

/// Every subcommand that prints a result exits 74 when it cannot be delivered: standard
/// output closed, or a pipe whose reader left before reading anything. The list is every
/// subcommand of `dlock --help` that prints on stdout (and `--help`, `help`, `--version`,
/// whose text is what was asked for); those that print nothing there (`run`, `elect`,
/// `extend`, `release` by token) are unaffected. `acquire` leaves nothing held; `release
/// --force` with stdout closed releases nothing. `bench` is tried with stdout closed only:
/// with a reader gone it would run its whole measurement before writing.
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

// Issue 36, part 4: the CLI's rough edges, each shown here.

#[test]
fn every_install_line_in_the_docs_uses_the_lock_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("cargo install")) {
            seen += 1;
            assert!(line.contains("--locked"), "{}: {line}", file.display());
        }
    }
    assert!(seen > 0, "the README says how to install dlock");
}

#[test]
fn the_test_script_ends_with_its_summary_and_keeps_its_status() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    // A stand-in for cargo that prints what nextest prints for a failed run.
    let fake = dir.path().join("cargo");
    std::fs::write(
        &fake,
        r#"#!/bin/sh
case "$*" in
  "nextest --version") echo "cargo-nextest 0.9.0"; exit 0 ;;
  *--doc*) echo "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured"; exit 0 ;;
  *--features*) echo "     Summary [   1.000s] 1 test run: 1 passed, 0 skipped"; exit 0 ;;
esac
echo "        PASS [   0.100s] dlock-cli::cli one"
echo "        FAIL [   0.200s] dlock-cli::cli two"
echo "------------"
echo "     Summary [  10.000s] 3 tests run: 2 passed, 1 failed, 4 skipped"
echo "        FAIL [   0.200s] dlock-cli::cli two"
echo "error: test run failed" >&2
exit 100
"#,
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    // Both streams in one, as a terminal shows them.
    let out = Command::new("bash")
        .arg("-c")
        .arg("\"$0\" 2>&1")
        .arg(root.join("scripts/test.sh"))
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(100), "the runner's status is kept");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    // 2 + 1 (metrics) + 12 (doc tests) passed; 4 skipped + 1 ignored doc test.
    assert!(
        last.contains("15 passed") && last.contains("1 failed") && last.contains("5 skipped"),
        "the summary is the last line: {text}"
    );

    // A run that fails before any test (a build error) says so on its last line too,
    // rather than a clean-looking "0 failed".
    std::fs::write(
        &fake,
        r#"#!/bin/sh
case "$*" in
  "nextest --version") echo "cargo-nextest 0.9.0"; exit 0 ;;
  *--doc*) echo "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured"; exit 0 ;;
  *--features*) echo "     Summary [   1.000s] 1 test run: 1 passed, 0 skipped"; exit 0 ;;
esac
echo "error[E0308]: mismatched types" >&2
exit 101
"#,
    )
    .unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg("\"$0\" 2>&1")
        .arg(root.join("scripts/test.sh"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.path().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(101), "the runner's status is kept");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("the run failed (exit 101)"), "{text}");
}

#[test]
fn a_subcommand_lists_its_own_options_before_the_global_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["elect", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let at = |needle: &str| {
        help.find(needle)
            .unwrap_or_else(|| panic!("{needle} in {help}"))
    };
    let heading = at("Global options");
    for own in ["--value", "--ttl", "--kill-after"] {
        assert!(at(own) < heading, "{own} before the global options: {help}");
    }
    for global in ["--redis", "--cluster", "--prefix", "--quiet"] {
        assert!(at(global) > heading, "{global} under its heading: {help}");
    }
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
    // `run` waits forever by default: it must say so at once instead.
    let mut child = dlock(&server)
        .args(["run", "plain", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("dlock run waited on a key that is no lock");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(65));
    let stored: String = server.cmd(&["GET", "plain"]);
    assert_eq!(stored, "hello", "nothing was changed");
    // Another client's lock with a lease is still a busy lock.
    let _: () = server.cmd(&["SET", "leased", "theirs", "PX", "60000"]);
    assert_eq!(code(dlock(&server).args(["acquire", "leased", "-n"])), 75);
}

#[test]
fn a_full_semaphore_says_none_of_its_permits_is_free() {
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
        assert!(stderr.contains("none of its 2 permits is free"), "{stderr}");
        assert!(!stderr.contains("another owner"), "{stderr}");
    }
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
fn inspect_columns_fit_clock_floor_fences_and_say_what_is_queued() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
    let out = output(dlock(&server).args(["inspect", "job"]));
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    let fence: String = server.cmd(&["GET", "{job}:fence"]);
    assert!(fence.len() >= 16, "a clock-floor fence: {fence}");
    let header_end = lines[0].find("FENCE").unwrap() + "FENCE".len();
    let row_end = lines[1].find(&fence).unwrap() + fence.len();
    assert_eq!(header_end, row_end, "FENCE stays in its column:\n{table}");
    let help = output(Command::new(env!("CARGO_BIN_EXE_dlock")).args(["inspect", "--help"]));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("not its readers"), "{help}");
}

#[test]
fn usage_errors_to_a_broken_stderr_exit_64_quietly() {
    for args in [
        &["acquire", "--bogus"][..],
        &["acquire", "x", "--ttl", "0s"],
        &["acquire", ""],
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

#[test]
fn an_interrupted_wait_says_so_in_one_line() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
    for command in [&["acquire", "job"][..], &["run", "job", "--", "true"]] {
        let child = dlock(&server)
            .args(command)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: signalling the dlock process this test spawned.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(143), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command:?}: {stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
    }
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

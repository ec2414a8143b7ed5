//! The `dlock` binary over several independent masters (`--redis` repeated: Redlock):
//! real redis-server processes from dlock-testkit, some killed (by pid) mid-test; the
//! usage errors, exit codes, and mutual exclusion across OS processes.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dlock_testkit::RedisServer;

mod common;
use common::{alive, wait_for_pid, wait_until_dead};

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

#[test]
fn run_acquire_extend_release_and_inspect_over_three_masters() {
    let servers = three_masters();
    let urls = urls(&servers);

    // run: the command holds the key on a majority of the masters (the grant is decided
    // once two of them granted it), with a fence drawn there.
    let count = servers
        .iter()
        .map(|s| {
            format!(
                "if [ \"$(redis-cli -p {} GET job)\" = \"$DLOCK_TOKEN\" ]; then n=$((n+1)); fi; ",
                s.port()
            )
        })
        .collect::<String>();
    let (code, stdout, stderr) = run(over(&urls).args([
        "run",
        "job",
        "--",
        "sh",
        "-c",
        &format!("n=0; {count}test $n -ge 2 && echo \"fence $DLOCK_FENCE\""),
    ]));
    assert_eq!(code, 0, "{stderr}");
    let first: u64 = stdout
        .trim()
        .strip_prefix("fence ")
        .unwrap()
        .parse()
        .unwrap();
    for server in &servers {
        assert_eq!(holder(server, "job"), None, "released on every master");
    }

    // acquire, the masters from DLOCK_REDIS separated by commas.
    let (code, stdout, stderr) = run(dlock()
        .env("DLOCK_REDIS", urls.join(","))
        .args(["acquire", "job", "--ttl", "20s"]));
    assert_eq!(code, 0, "{stderr}");
    let (token, fence) = stdout.trim().split_once(' ').unwrap();
    let fence: u64 = fence.parse().unwrap();
    assert!(fence > first, "the fence grows from grant to grant");
    let holding: Vec<&RedisServer> = servers
        .iter()
        .filter(|server| holder(server, "job").as_deref() == Some(token))
        .collect();
    assert!(holding.len() >= 2, "held by a majority");

    // Held: another acquire is busy (75), not an error.
    let (code, _, stderr) = run(over(&urls).args(["acquire", "job", "--no-wait"]));
    assert_eq!(code, 75, "{stderr}");

    // inspect: each master's copy, and the holder a majority agrees on.
    let (code, stdout, stderr) = run(over(&urls).args(["inspect", "job", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let lock: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    // The client tag and the first 8 digits of the random part.
    let (tag, random) = token.rsplit('/').next().unwrap().split_once('.').unwrap();
    let short = format!("{tag}.{}", &random[..8]);
    assert_eq!(lock["holder"]["token_prefix"], short.as_str(), "{lock}");
    assert_eq!(lock["redlock"]["quorum"], 2, "{lock}");
    // At least the grant's fence: a master that granted after the quorum decided drew
    // its own (its clock, a little later).
    assert!(lock["last_fence"].as_u64().unwrap() >= fence, "{lock}");
    assert_eq!(lock["holder"]["masters"], holding.len(), "{lock}");
    let masters = lock["masters"].as_array().unwrap();
    assert_eq!(masters.len(), 3);
    for ((master, url), server) in masters.iter().zip(&urls).zip(&servers) {
        assert_eq!(master["master"], url.as_str());
        if holder(server, "job").as_deref() == Some(token) {
            assert_eq!(master["kind"], "exclusive");
            assert_eq!(master["holders"][0]["token_prefix"], short.as_str());
        } else {
            assert_eq!(master["kind"], "free");
        }
    }

    // The same as Prometheus text: each master's series labelled with it, and whether a
    // majority agrees on a holder.
    let (code, stdout, stderr) = run(over(&urls).args(["inspect", "job", "--prometheus"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("dlock_lock_quorum_held{lock=\"job\"} 1"),
        "{stdout}"
    );
    for (url, server) in urls.iter().zip(&servers) {
        let held = holder(server, "job").as_deref() == Some(token);
        let kind = if held { "exclusive" } else { "free" };
        let series = format!(
            "dlock_lock_held{{lock=\"job\",master=\"{url}\"}} {}",
            held as u8
        );
        assert!(stdout.contains(&series), "{series} in {stdout}");
        let info = format!("dlock_lock_info{{lock=\"job\",master=\"{url}\",kind=\"{kind}\"}} 1");
        assert!(stdout.contains(&info), "{info} in {stdout}");
        let up = format!("dlock_master_up{{master=\"{url}\"}} 1");
        assert!(stdout.contains(&up), "{up} in {stdout}");
    }

    // extend resets the lease on every master that holds it.
    let (code, _, stderr) = run(over(&urls).args(["extend", "job", token, "--ttl", "40s"]));
    assert_eq!(code, 0, "{stderr}");
    for server in &holding {
        let pttl: i64 = server.cmd(&["PTTL", "job"]);
        assert!(pttl > 20_000, "the 20s lease became 40s: {pttl} ms left");
    }

    // release on every master; a second release is not the owner's any more (77).
    let (code, _, stderr) = run(over(&urls).args(["release", "job", token]));
    assert_eq!(code, 0, "{stderr}");
    for server in &servers {
        assert_eq!(holder(server, "job"), None);
    }
    let (code, _, stderr) = run(over(&urls).args(["release", "job", token]));
    assert_eq!(code, 77, "{stderr}");
}

#[test]
fn one_master_down_still_grants_renews_and_is_shown_unreachable() {
    let mut servers = three_masters();
    let urls = urls(&servers);
    servers[2].kill9();

    let (code, stdout, stderr) = run(over(&urls).args([
        "run",
        "job",
        "--",
        "sh",
        "-c",
        "echo \"ran with fence $DLOCK_FENCE\"",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("ran with fence "), "{stdout}");

    let (code, stdout, stderr) = run(over(&urls).args(["acquire", "job", "--ttl", "20s"]));
    assert_eq!(code, 0, "{stderr}");
    let token = stdout.split(' ').next().unwrap().to_string();
    assert_eq!(holder(&servers[0], "job").as_deref(), Some(token.as_str()));
    assert_eq!(holder(&servers[1], "job").as_deref(), Some(token.as_str()));

    // inspect shows the two copies and names the master it cannot reach.
    let (code, stdout, stderr) = run(over(&urls).args(["inspect", "job"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("held by"), "{stdout}");
    assert!(stdout.contains("on 2"), "{stdout}");
    let down = stdout
        .lines()
        .find(|line| line.contains(&urls[2]))
        .unwrap_or_else(|| panic!("the down master is not listed:\n{stdout}"));
    assert!(down.contains("unreachable"), "{stdout}");

    let (code, _, stderr) = run(over(&urls).args(["release", "job", &token]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(holder(&servers[0], "job"), None);
}

#[test]
fn a_master_killed_while_the_command_runs_leaves_a_majority_to_renew_on() {
    let mut servers = three_masters();
    let urls = urls(&servers);
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let token_file = dir.path().join("token");
    // The command waits for the test's go, then runs on past several renewal periods of
    // its 600ms lease.
    let script = format!(
        "echo \"$DLOCK_TOKEN\" > {token}; echo $$ > {started}; while [ ! -e {go} ]; do sleep 0.02; done; sleep 1.5; echo done",
        token = token_file.display(),
        started = started.display(),
        go = go.display()
    );
    let child = over(&urls)
        .args(["run", "job", "--ttl", "600ms", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_pid(&started);
    // A master that granted the lock goes away.
    let token = std::fs::read_to_string(&token_file).unwrap();
    let killed = servers
        .iter()
        .position(|server| holder(server, "job").as_deref() == Some(token.trim()))
        .expect("a master holds the lock");
    servers[killed].kill9();
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), "done\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (index, server) in servers.iter().enumerate() {
        if index != killed {
            assert_eq!(holder(server, "job"), None, "released on the others");
        }
    }
}

#[test]
fn two_masters_down_is_exit_69_naming_them() {
    let mut servers = three_masters();
    let urls = urls(&servers);
    servers[0].kill9();
    servers[2].kill9();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");

    let (code, _, stderr) =
        run(over(&urls).args(["run", "job", "--", "touch", marker.to_str().unwrap()]));
    assert_eq!(code, 69, "{stderr}");
    assert!(!marker.exists(), "the command ran without the lock");
    for (url, down) in urls.iter().zip([true, false, true]) {
        assert_eq!(stderr.contains(url.as_str()), down, "{url}: {stderr}");
    }
    assert!(stderr.contains("hint:"), "{stderr}");

    let (code, stdout, stderr) = run(over(&urls).args(["acquire", "job"]));
    assert_eq!((code, stdout.as_str()), (69, ""), "{stderr}");
    assert!(
        stderr.contains(&urls[0]) && stderr.contains(&urls[2]),
        "{stderr}"
    );
    assert_eq!(holder(&servers[1], "job"), None, "nothing left held");

    // With no master at all, inspect fails the same way.
    servers[1].kill9();
    let (code, _, stderr) = run(over(&urls).args(["inspect", "job"]));
    assert_eq!(code, 69, "{stderr}");
    assert!(
        urls.iter().all(|url| stderr.contains(url.as_str())),
        "{stderr}"
    );
}

#[test]
fn a_lock_taken_from_a_majority_stops_the_command_with_70() {
    let servers = three_masters();
    let urls = urls(&servers);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // The command ignores SIGTERM, so only the SIGKILL after --kill-after ends it.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let child = over(&urls)
        .args([
            "run",
            "job",
            "--ttl",
            "600ms",
            "--kill-after",
            "200ms",
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
    // Another owner on two of the three masters: the next renewal finds it gone there.
    for server in &servers[..2] {
        let _: () = server.cmd(&["SET", "job", "someone-else", "PX", "60000"]);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("lost the lock"), "{stderr}");
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "the command kept running without the lock"
    );
    for server in &servers[..2] {
        assert_eq!(holder(server, "job").as_deref(), Some("someone-else"));
    }
}

#[test]
fn renewals_that_cannot_reach_a_majority_stop_the_command_with_70() {
    let mut servers = three_masters();
    let urls = urls(&servers);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!(
        "echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let child = over(&urls)
        .args(["run", "job", "--ttl", "1s", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = wait_for_pid(&pid_file);
    servers[0].kill9();
    servers[1].kill9();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("kept failing"), "{stderr}");
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "the command kept running without a majority"
    );
}

/// Two `dlock run` processes per round, started together. Each appends `start ID` and
/// `end ID` to a log, and in between waits for the other to start (a `patience` of 10 ms
/// steps): when nothing excludes them, that makes them overlap for certain; under the
/// lock it gives the other every chance to get in. `same_lock`: both take `job`;
/// otherwise each its own name (the negative control). Returns the most holders the log
/// shows at once.
fn most_at_once(
    urls: &[String],
    dir: &Path,
    same_lock: bool,
    rounds: usize,
    patience: u32,
) -> usize {
    let log = dir.join("log");
    std::fs::write(&log, "").unwrap();
    for round in 0..rounds {
        let runs: Vec<_> = ["a", "b"]
            .iter()
            .map(|id| {
                let peer = if *id == "a" { "b" } else { "a" };
                let started = |who: &str| dir.join(format!("started.{round}.{who}"));
                let script = format!(
                    "echo \"start {id}\" >> {log}; touch {mine}; n=0; while [ ! -e {theirs} ] && [ $n -lt {patience} ]; do sleep 0.01; n=$((n+1)); done; echo \"end {id}\" >> {log}",
                    log = log.display(),
                    mine = started(id).display(),
                    theirs = started(peer).display(),
                );
                let name = if same_lock { "job".to_string() } else { format!("job-{id}") };
                over(urls)
                    .args(["run", &name, "--", "sh", "-c", &script])
                    .stdin(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in runs {
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log.lines().count(), rounds * 4, "every run logged: {log}");
    let (mut holding, mut most) = (0usize, 0usize);
    for line in log.lines() {
        if line.starts_with("start") {
            holding += 1;
            most = most.max(holding);
        } else {
            holding -= 1;
        }
    }
    most
}

#[test]
fn concurrent_runs_over_three_masters_never_overlap() {
    let servers = three_masters();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(most_at_once(&urls(&servers), dir.path(), true, 4, 30), 1);
}

#[test]
fn negative_control_runs_under_different_names_overlap() {
    let servers = three_masters();
    let dir = tempfile::tempdir().unwrap();
    // Each waits (up to 30 s) for the other to start: both are inside at once.
    assert_eq!(most_at_once(&urls(&servers), dir.path(), false, 1, 3000), 2);
}

/// Exit 64 with every needle in the message, before any connection (nothing listens).
fn usage(args: &[&str], env: &[(&str, &str)], needles: &[&str]) {
    let mut command = over(&NOWHERE.map(String::from));
    command.args(args);
    for (var, value) in env {
        command.env(var, value);
    }
    let (code, _, stderr) = run(&mut command);
    assert_eq!(code, 64, "{args:?}: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
    assert!(stderr.contains("hint:"), "{args:?}: {stderr}");
}

#[test]
fn other_kinds_and_deployment_flags_are_refused_with_several_masters() {
    for (flag, value) in [
        ("--fair", None),
        ("--read", None),
        ("--write", None),
        ("--permits", Some("2")),
    ] {
        let kind: Vec<&str> = [Some(flag), value].into_iter().flatten().collect();
        let with = |verb: &[&'static str], tail: &[&'static str]| -> Vec<&'static str> {
            let mut args = verb.to_vec();
            args.extend(&kind);
            args.extend(tail);
            args
        };
        for args in [
            with(&["run", "job"], &["--", "true"]),
            with(&["acquire", "job"], &[]),
            with(&["release", "job", "TOKEN"], &[]),
            with(&["extend", "job", "TOKEN", "--ttl", "10s"], &[]),
        ] {
            usage(&args, &[], &[flag, "single-master only", "consensus"]);
        }
    }
    let ca = NOWHERE[0];
    usage(
        &["--cluster", ca, "acquire", "job"],
        &[],
        &["--cluster", "--redis"],
    );
    usage(
        &["--sentinel", ca, "--service", "s", "acquire", "job"],
        &[],
        &["--sentinel", "--redis"],
    );
    usage(&["--service", "s", "acquire", "job"], &[], &["--sentinel"]);
    usage(
        &["--replicas", "1", "acquire", "job"],
        &[],
        &["--replicas", "majority"],
    );
    usage(
        &["acquire", "job"],
        &[("DLOCK_REPLICAS", "1")],
        &["DLOCK_REPLICAS"],
    );
    usage(&["release", "--force", "job"], &[], &["--force"]);
    usage(&["bench", "--spawn"], &[], &["--spawn"]);
    usage(
        &["--redis", NOWHERE[0], "acquire", "job"],
        &[],
        &["named twice"],
    );
}

#[test]
fn one_url_in_dlock_redis_is_still_one_server() {
    let server = RedisServer::start();
    let (code, stdout, stderr) = run(dlock()
        .env("DLOCK_REDIS", server.url())
        .args(["inspect", "job", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let lock: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(
        lock.get("masters").is_none(),
        "a single server's view: {lock}"
    );
    assert_eq!(lock["kind"], "free");
}

#[test]
fn bench_over_the_named_masters_runs_the_redlock_scenarios_alone_and_cleans_up() {
    let servers = three_masters();
    let urls = urls(&servers);
    let (code, stdout, stderr) = run(over(&urls).args(["bench", "--quick", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let row = &rows[0];
    assert_eq!(row["scenario"], "redlock");
    assert_eq!(row["unit"], "cycles/s");
    assert_eq!(row["masters"], 3);
    assert_eq!(row["baseline_masters"], 1);
    assert!(row["value"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["baseline"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["ratio"].as_f64().unwrap() > 0.0, "{row}");
    // The raw fan-out over the same masters, measured beside it.
    assert!(row["raw_fan_out"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["raw_one_master"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["raw_fan_out_ratio"].as_f64().unwrap() > 0.0, "{row}");
    // The hand-offs among 8 waiters of one handle, and what each cost.
    let herd = &rows[1];
    assert_eq!(herd["scenario"], "redlock_herd");
    assert_eq!(herd["unit"], "hand-offs/s");
    assert_eq!(herd["waiters"], 8);
    assert_eq!(herd["masters"], 3);
    assert!(herd["value"].as_f64().unwrap() > 0.0, "{herd}");
    let rounds = herd["rounds_per_handoff"].as_f64().unwrap();
    assert!((1.0..=3.0).contains(&rounds), "{herd}");
    let draws = herd["fence_increments_per_grant"].as_f64().unwrap();
    assert!(draws > 0.0 && draws <= 3.0, "{herd}");
    // Every master served the cycles (its scripts ran), and none keeps the run's keys.
    for server in &servers {
        let calls = server.command_calls();
        assert!(calls.get("evalsha").copied().unwrap_or(0) > 0, "{calls:?}");
        let left: Vec<String> = server.cmd(&["KEYS", "*dlock-bench*"]);
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

#[test]
fn a_bench_interrupted_mid_scenario_leaves_no_keys_on_the_masters() {
    let servers = three_masters();
    let urls = urls(&servers);
    let mut bench = over(&urls)
        .args(["bench", "--duration", "5s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the scenario has written its counters (fence keys never expire).
    let mut written = false;
    for _ in 0..300 {
        let keys: Vec<String> = servers[0].cmd(&["KEYS", "*dlock-bench*"]);
        if !keys.is_empty() {
            written = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(written, "the scenario never wrote its keys");
    // SAFETY: kill has no memory effects; the pid is the child this test started.
    unsafe { libc::kill(bench.id() as i32, libc::SIGINT) };
    let status = bench.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    for server in &servers {
        let left: Vec<String> = server.cmd(&["KEYS", "*dlock-bench*"]);
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

//! The `dlock` binary on a Redis Cluster (`--cluster`), through Redis Sentinel
//! (`--sentinel`, `--service`), and with replica acknowledgement (`--replicas`): real
//! redis-server processes from the test kit (dlock_testkit), the flags' usage errors and exit codes.

use std::process::{Command, Output, Stdio};

use dlock_testkit::{key_slot, MasterWithReplicas, RedisCluster, RedisServer, SentinelGroup};

/// Nothing listens here: what must fail before (or without) connecting.
const NOWHERE: &str = "redis://127.0.0.1:1";

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
    ] {
        command.env_remove(var);
    }
    command
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

/// A shell command that succeeds when the lock's key on the server at `port` holds the
/// command's own DLOCK_TOKEN, and prints its fence.
fn check_own_key(port: u16, name: &str) -> String {
    format!(
        "test \"$(redis-cli -p {port} GET {name})\" = \"$DLOCK_TOKEN\" && echo \"fence $DLOCK_FENCE\""
    )
}

#[test]
fn run_acquire_extend_release_and_inspect_on_a_three_master_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls();
    let master_of = |name: &str| &cluster.masters()[cluster.master_for_slot(key_slot(name))];
    let on_cluster = || {
        let mut command = dlock();
        command.args(["--cluster", &seeds[0], "--cluster", &seeds[1]]);
        command
    };

    // run: the command's lock is the key on the master that serves the name's slot.
    let master = master_of("deploy");
    let (code, stdout, stderr) = run(on_cluster().args([
        "run",
        "deploy",
        "--",
        "sh",
        "-c",
        &check_own_key(master.port(), "deploy"),
    ]));
    assert_eq!(code, 0, "{stderr}");
    let first: u64 = stdout
        .trim()
        .strip_prefix("fence ")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        holder(master, "deploy"),
        None,
        "released when the command ended"
    );

    // acquire, seeds from DLOCK_CLUSTER (comma-separated), one of them unreachable.
    let from_env = format!("{NOWHERE},{}", seeds.join(","));
    let (code, stdout, stderr) = run(dlock()
        .env("DLOCK_CLUSTER", &from_env)
        .args(["acquire", "deploy", "--ttl", "20s"]));
    assert_eq!(code, 0, "{stderr}");
    let (token, fence) = stdout.trim().split_once(' ').unwrap();
    assert!(fence.parse::<u64>().unwrap() > first, "the fence grows");
    assert_eq!(holder(master, "deploy").as_deref(), Some(token));

    // A second lock on another master: inspect --match scans every master.
    let other = (0..100)
        .map(|i| format!("job{i}"))
        .find(|name| !std::ptr::eq(master_of(name), master))
        .unwrap();
    let (code, _, stderr) = run(on_cluster().args(["acquire", &other, "--ttl", "20s"]));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(on_cluster().args(["inspect", "--match", "*", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let mut names: Vec<String> = stdout
        .lines()
        .map(|line| {
            let lock: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(lock["kind"], "exclusive", "{line}");
            assert_eq!(lock["holders"].as_array().unwrap().len(), 1, "{line}");
            lock["name"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    let mut expected = vec!["deploy".to_string(), other.clone()];
    expected.sort();
    assert_eq!(names, expected);

    // extend resets the lease on the right master.
    let (code, _, stderr) = run(on_cluster().args(["extend", "deploy", token, "--ttl", "40s"]));
    assert_eq!(code, 0, "{stderr}");
    let pttl: i64 = master.cmd(&["PTTL", "deploy"]);
    assert!(pttl > 20_000, "extended to 40s: {pttl} ms left");

    // release by token; a second release is refused (not the owner).
    let (code, _, stderr) = run(on_cluster().args(["release", "deploy", token]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(holder(master, "deploy"), None);
    let (code, _, stderr) = run(on_cluster().args(["release", "deploy", token]));
    assert_eq!(code, 77, "{stderr}");
    let (code, stdout, stderr) = run(on_cluster().args(["inspect", "deploy"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("free"), "{stdout}");

    // The operator's override works there too.
    let (code, _, stderr) = run(on_cluster().args(["release", "--force", &other]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(holder(master_of(&other), &other), None);
}

#[test]
fn bench_on_a_cluster_measures_its_baseline_on_the_cluster_and_cleans_up() {
    let cluster = RedisCluster::start(3, 0);
    let (code, stdout, stderr) = run(dlock().args([
        "--cluster",
        &cluster.urls()[0],
        "bench",
        "--quick",
        "--renew-locks",
        "100",
        "--capacity-locks",
        "200",
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 31, "{stdout}");
    for row in rows.iter().filter(|row| row["unit"] == "cycles/s") {
        assert!(row["value"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["baseline"].as_f64().unwrap() > 0.0, "{row}");
    }
    // The floors that need one server's raw subscriber are null on a cluster, not left out.
    let handoffs: Vec<_> = rows
        .iter()
        .filter(|row| row["gap_p50_ms"].is_number())
        .collect();
    assert_eq!(handoffs.len(), 3, "the hand-offs with a gap: {stdout}");
    for row in handoffs {
        for field in [
            "floor",
            "floor_ping_p50_ms",
            "floor_direct_handoff_p50_ms",
            "gap_to_direct_handoff",
        ] {
            let value = row
                .get(field)
                .unwrap_or_else(|| panic!("{field} left out: {row}"));
            assert!(value.is_null(), "{field}: {row}");
        }
    }
    // The raw baseline's keys went through the cluster connection: they are spread over
    // the masters, and the clean-up scanned every one of them.
    for master in cluster.masters() {
        let calls = master.command_calls();
        assert!(
            calls.get("set").copied().unwrap_or(0) > 0,
            "master {} saw no raw SET: {calls:?}",
            master.port()
        );
        let left: Vec<String> = master.cmd(&["KEYS", "*dlock-bench*"]);
        assert!(
            left.is_empty(),
            "left behind on {}: {left:?}",
            master.port()
        );
    }
}

#[test]
fn run_acquire_and_inspect_through_sentinel() {
    let master = RedisServer::start();
    let sentinels = SentinelGroup::start(&master, "locks", 1);
    let urls = sentinels.urls();

    let (code, stdout, stderr) = run(dlock().args([
        "--sentinel",
        &urls[0],
        "--service",
        "locks",
        "run",
        "job",
        "--",
        "sh",
        "-c",
        &check_own_key(master.port(), "job"),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("fence "), "{stdout}");
    assert_eq!(holder(&master, "job"), None);

    // From the environment, an unreachable sentinel first.
    let with_env = || {
        let mut command = dlock();
        command
            .env("DLOCK_SENTINEL", format!("{NOWHERE},{}", urls[0]))
            .env("DLOCK_SERVICE", "locks");
        command
    };
    let (code, stdout, stderr) = run(with_env().args(["acquire", "job", "--ttl", "20s"]));
    assert_eq!(code, 0, "{stderr}");
    let token = stdout.split_whitespace().next().unwrap().to_string();
    assert_eq!(holder(&master, "job").as_deref(), Some(token.as_str()));
    let (code, stdout, _) = run(with_env().args(["inspect", "job"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("exclusive"), "{stdout}");
    let (code, _, stderr) = run(with_env().args(["release", "job", &token]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(holder(&master, "job"), None);

    // A service the sentinels do not know: unavailable (69), and the hint names --service.
    let (code, _, stderr) = run(dlock().args([
        "--sentinel",
        &urls[0],
        "--service",
        "no-such-service",
        "acquire",
        "job",
    ]));
    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr.contains("no-such-service") && stderr.contains("--service"),
        "{stderr}"
    );
}

#[test]
fn replicas_grant_only_what_the_replicas_acknowledge() {
    let group = MasterWithReplicas::start(1);
    let master = group.master();
    let url = master.url();
    // Granted cases get the default --replica-timeout (1s, a margin for a loaded
    // machine); refusals a short one, to be quick.
    let with_replicas = || {
        let mut command = dlock();
        command.args(["--redis", &url, "--replicas", "1"]);
        command
    };
    let impatient = || {
        let mut command = with_replicas();
        command.args(["--replica-timeout", "300ms"]);
        command
    };

    // A replica reported online may not be sent the write stream until its first
    // acknowledgement after the initial sync (Redis 7.0, diskless sync: up to a second):
    // wait for one, so that what follows measures dlock, not the replica's start-up.
    let _: () = master.cmd(&["SET", "warm-up", "1"]);
    let acknowledged: i64 = master.cmd(&["WAIT", "1", "5000"]);
    assert_eq!(acknowledged, 1, "the replica acknowledges writes");

    // The replica keeps up: granted, as usual.
    let (code, stdout, stderr) = run(with_replicas().args(["acquire", "a", "--ttl", "10s"]));
    assert_eq!(code, 0, "{stderr}");
    let token = stdout.split_whitespace().next().unwrap().to_string();
    assert_eq!(holder(master, "a").as_deref(), Some(token.as_str()));
    let (code, _, stderr) = run(with_replicas().args(["extend", "a", &token, "--ttl", "10s"]));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(with_replicas().args(["run", "r", "--", "echo", "ran"]));
    assert_eq!((code, stdout.as_str()), (0, "ran\n"), "{stderr}");

    // A token taken without --replicas, to extend while the replica is frozen.
    let (code, stdout, _) = run(dlock().args(["--redis", &url, "acquire", "e", "--ttl", "10s"]));
    assert_eq!(code, 0);
    let unreplicated = stdout.split_whitespace().next().unwrap().to_string();

    group.replica(0).pause();
    let (code, _, stderr) = run(impatient().args(["acquire", "b", "--ttl", "10s"]));
    let (run_code, run_out, run_err) = run(impatient().args(["run", "c", "--", "echo", "ran"]));
    let (extend_code, _, extend_err) =
        run(impatient().args(["extend", "e", &unreplicated, "--ttl", "10s"]));
    group.replica(0).resume();

    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr.contains("0 of 1 replicas") && stderr.contains("--replica-timeout"),
        "says why and what to do: {stderr}"
    );
    let exists: i64 = master.cmd(&["EXISTS", "b"]);
    assert_eq!(exists, 0, "the unacknowledged grant was given back");
    assert_eq!((run_code, run_out.as_str()), (69, ""), "{run_err}");
    let exists: i64 = master.cmd(&["EXISTS", "c"]);
    assert_eq!(exists, 0);
    assert_eq!(extend_code, 69, "{extend_err}");
    assert!(extend_err.contains("given back"), "{extend_err}");
    let exists: i64 = master.cmd(&["EXISTS", "e"]);
    assert_eq!(exists, 0, "an unacknowledged extend gives the hold back");

    // The replica caught up: granted again.
    group.wait_for_replicas();
    let (code, _, stderr) = run(with_replicas().args(["acquire", "b", "--ttl", "10s"]));
    assert_eq!(code, 0, "{stderr}");

    // run's renewals wait for the replicas too: frozen mid-run, the command is stopped.
    let mut running = impatient()
        .args(["run", "long", "--ttl", "1500ms", "--", "sleep", "30"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while holder(master, "long").is_none() {
        if started.elapsed() > std::time::Duration::from_secs(10) {
            let _ = running.kill();
            panic!("never granted");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    group.replica(0).pause();
    let stopped = running.wait_with_output().unwrap();
    group.replica(0).resume();
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("--replica-timeout"), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "stopped within its lease, not after the command"
    );
}

#[test]
fn topology_and_replica_flags_are_checked_before_connecting() {
    let usage = |args: &[&str], env: &[(&str, &str)], needles: &[&str]| {
        let (code, _, stderr) = run(dlock().envs(env.iter().copied()).args(args));
        assert_eq!(code, 64, "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains("hint:"), "{stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: lacks {needle:?}: {stderr}"
            );
        }
    };
    let (nowhere, service) = (NOWHERE, "mymaster");
    usage(
        &["--redis", nowhere, "--cluster", nowhere, "inspect", "x"],
        &[],
        &["--cluster", "--redis", "one Redis deployment"],
    );
    usage(
        &[
            "inspect",
            "x",
            "--cluster",
            nowhere,
            "--sentinel",
            nowhere,
            "--service",
            service,
        ],
        &[],
        &["--sentinel", "--cluster"],
    );
    usage(
        &["inspect", "x"],
        &[("DLOCK_REDIS", nowhere), ("DLOCK_CLUSTER", nowhere)],
        &["DLOCK_REDIS", "DLOCK_CLUSTER"],
    );
    usage(
        &["--sentinel", nowhere, "inspect", "x"],
        &[],
        &["--service"],
    );
    usage(
        &["--service", service, "inspect", "x"],
        &[],
        &["--sentinel"],
    );
    usage(
        &["--cluster", nowhere, "bench", "--spawn"],
        &[],
        &["--spawn", "--cluster"],
    );
    usage(
        &["--replicas", "0", "acquire", "x"],
        &[],
        &["--replicas 0", "1 to 64"],
    );
    usage(
        &[
            "--replicas",
            "1",
            "--replica-timeout",
            "5s",
            "acquire",
            "x",
            "--ttl",
            "5s",
        ],
        &[],
        &["--replica-timeout 5s", "shorter than the lease", "--ttl 5s"],
    );
    usage(
        &[
            "--replicas",
            "1",
            "--replica-timeout",
            "2s",
            "extend",
            "x",
            "t",
            "--ttl",
            "1s",
        ],
        &[],
        &["shorter than the lease"],
    );
    usage(
        &[
            "--replicas",
            "1",
            "--replica-timeout",
            "2s",
            "run",
            "x",
            "--ttl",
            "1s",
            "--",
            "true",
        ],
        &[],
        &["shorter than the lease"],
    );
    usage(
        &["--replica-timeout", "1s", "acquire", "x"],
        &[],
        &["--replicas"],
    );
    usage(&["--replicas", "1", "bench"], &[], &["--replicas"]);

    // A flag on the command line beats another deployment's variable: here the cluster
    // is chosen, cannot be reached (69), and the hint names its flag.
    let (code, _, stderr) =
        run(dlock()
            .env("DLOCK_REDIS", nowhere)
            .args(["--cluster", nowhere, "inspect", "x"]));
    assert_eq!(code, 69, "{stderr}");
    assert!(stderr.contains("--cluster / DLOCK_CLUSTER"), "{stderr}");
    let (code, _, stderr) =
        run(dlock().args(["--sentinel", nowhere, "--service", service, "acquire", "x"]));
    assert_eq!(code, 69, "{stderr}");
    assert!(stderr.contains("--sentinel / DLOCK_SENTINEL"), "{stderr}");

    let (code, help, _) = run(dlock().arg("--help"));
    assert_eq!(code, 0);
    // The help wraps at the terminal's width: a phrase may span lines.
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "--cluster <URL>",
        "DLOCK_CLUSTER",
        "--sentinel <URL>",
        "--service <NAME>",
        "DLOCK_SERVICE",
        "--replicas <N>",
        "--replica-timeout <DUR>",
        "fewer than --replicas",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

/// On a cluster too, a key that is not UTF-8 (on whichever master its slot is) is skipped
/// by `inspect --match`, counted in `-v` output, and the locks on every master are listed.
#[test]
fn a_key_that_is_not_utf8_on_a_cluster_is_skipped_by_inspect_match() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls();
    let on_cluster = || {
        let mut command = dlock();
        command
            .args(["--cluster", &seeds[0]])
            .env_remove("RUST_LOG");
        command
    };
    // Thirty locks, spread over the three masters' slots, and the odd key on its own.
    let names: Vec<String> = (0..30).map(|i| format!("odd:job{i}")).collect();
    for name in &names {
        let (code, _, stderr) = run(on_cluster().args(["acquire", name, "--ttl", "20s"]));
        assert_eq!(code, 0, "{stderr}");
    }
    let odd = &b"odd:bin\xff"[..];
    let master = &cluster.masters()[cluster.master_for_slot(key_slot(odd))];
    let _: () = redis::cmd("SET")
        .arg(odd)
        .arg("x")
        .query(&mut master.connection())
        .unwrap();
    for view in [&["--json"][..], &["--prometheus"]] {
        let (code, stdout, stderr) = run(on_cluster()
            .args(["inspect", "--match", "odd:*"])
            .args(view));
        assert_eq!(code, 0, "{view:?}: {stderr}");
        for name in &names {
            assert!(
                stdout.contains(&format!("\"{name}\"")),
                "{view:?}: {name}: {stdout}"
            );
        }
    }
    let (code, _, stderr) = run(on_cluster().args(["-v", "inspect", "--match", "odd:*"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("skipped 1 key"), "{stderr}");
}

#[test]
fn an_unreachable_cluster_is_said_once_and_the_redis_crates_warnings_wait_for_verbose() {
    // The redis crate logs a warning for each node it cannot reach; dlock's own line names
    // the node already, so by default that line is all stderr holds.
    let (code, _, stderr) = run(dlock().args(["--cluster", NOWHERE, "acquire", "c"]));
    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr
            .starts_with("dlock: cannot reach Redis through the cluster nodes redis://127.0.0.1:1"),
        "{stderr}"
    );
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.contains("127.0.0.1:1")).count(),
        1,
        "{stderr}"
    );
    // Negative control: the warning is there to be hidden, and -v shows it.
    let (code, _, stderr) = run(dlock().args(["-v", "--cluster", NOWHERE, "acquire", "c"]));
    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("Failed to connect"),
        "{stderr}"
    );
}

//! Grants, renewals, releases and `inspect` over three masters, with one or two of them
//! down or killed mid-command, and a lock taken from a majority.

use std::process::Stdio;
use std::time::Duration;

use dlock_testkit::RedisServer;

use crate::common::{alive, wait_for_pid, wait_until_dead};
use crate::{dlock, holder, over, run, three_masters, urls};

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
    assert!(
        stderr.contains("\"job\" at the masters redis://"),
        "{stderr}"
    );
    assert!(stderr.contains("kept failing"), "{stderr}");
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "the command kept running without a majority"
    );
}

/// A string without an expiry on a majority of the masters is no lock (none of dlock's
/// has no lease), so `run` says so at once (65) rather than wait forever for a release
/// that never comes; on a minority it is one master's stray key, and the lock is granted.
#[test]
fn a_string_without_an_expiry_on_a_majority_is_not_a_lock() {
    let servers = three_masters();
    let urls = urls(&servers);
    for server in &servers[..2] {
        let _: () = server.cmd(&["SET", "plain", "hello"]);
    }
    let mut child = over(&urls)
        .args(["run", "plain", "--", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("dlock run waited on a key that is no lock");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{stderr}");
    assert!(stderr.contains("not a dlock lock"), "{stderr}");
    for server in &servers[..2] {
        assert_eq!(holder(server, "plain").as_deref(), Some("hello"));
    }
    // On one master only: a majority is free, and the command runs.
    let _: i64 = servers[1].cmd(&["DEL", "plain"]);
    let (code, _, stderr) = run(over(&urls).args(["run", "plain", "-n", "--", "true"]));
    assert_eq!(code, 0, "{stderr}");
}

//! flock's habits, every kind from the shell, `inspect` as JSON and as Prometheus text, a
//! token nobody read, and a forced release's fence.

use std::process::{Command, Stdio};
use std::time::Duration;

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, output};

#[test]
fn acquire_without_a_reader_for_the_token_leaves_nothing_held() {
    let server = RedisServer::start();
    let bin = env!("CARGO_BIN_EXE_dlock");
    // The reader closes its end before dlock prints: the write fails. dlock starts only
    // once the reader has closed it, however late the reader's subshell runs.
    let dir = tempfile::tempdir().unwrap();
    let closed = dir.path().join("closed");
    let closed = closed.display();
    let status = Command::new("bash")
        .args([
            "-c",
            &format!(
                "(until [ -e {closed} ]; do sleep 0.01; done; exec {bin} acquire job) \
                 | (exec 0<&-; touch {closed}; sleep 1); exit ${{PIPESTATUS[0]}}"
            ),
        ])
        .env("DLOCK_REDIS", server.url())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(74));
    assert!(String::from_utf8_lossy(&status.stderr).contains("released"));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);

    // stdout closed altogether: nothing is taken.
    let closed = Command::new("bash")
        .args(["-c", &format!("{bin} acquire job >&-")])
        .env("DLOCK_REDIS", server.url())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(closed.status.code(), Some(74));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);

    // inspect, whose output is all it does, says so too (a --watch would never end).
    for args in [
        "inspect job",
        "inspect job --prometheus",
        "inspect job --watch",
    ] {
        let closed = Command::new("bash")
            .args(["-c", &format!("{bin} {args} >&-")])
            .env("DLOCK_REDIS", server.url())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(closed.status.code(), Some(74), "{args}");
    }

    // Control: printed to a reader, the lock stays held for its lease.
    let out = output(dlock(&server).args(["acquire", "job"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 1);
}

#[test]
fn flock_habits_conflict_exit_code_and_quiet() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
    let busy = output(dlock(&server).args(["run", "job", "-n", "-E", "3", "--", "true"]));
    assert_eq!(busy.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("held by another owner"));
    let quiet = output(dlock(&server).args(["-q", "run", "job", "--no-wait", "--", "true"]));
    assert_eq!(quiet.status.code(), Some(75));
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let timed = output(dlock(&server).args(["-q", "acquire", "job", "--wait", "200ms", "-E", "9"]));
    assert_eq!(timed.status.code(), Some(9));
    assert!(timed.stderr.is_empty());
    // Quiet is about "busy" only: real errors still speak.
    // flock accepts -E 0 (busy is fine, say nothing), as the README's cron example does.
    let fine = output(dlock(&server).args(["-q", "run", "job", "-n", "-E", "0", "--", "true"]));
    assert_eq!(fine.status.code(), Some(0));
    let bad = output(dlock(&server).args(["-q", "run", "", "--", "true"]));
    assert_eq!(bad.status.code(), Some(64));
    assert!(!bad.stderr.is_empty());
}

#[test]
fn every_kind_from_the_shell_and_inspect_as_json() {
    let server = RedisServer::start();
    let take = |name: &str, kind: &[&str]| {
        let mut args = vec!["acquire", name, "--ttl", "30s"];
        args.extend_from_slice(kind);
        let out = output(dlock(&server).args(&args));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8(out.stdout).unwrap();
        line.split_whitespace().next().unwrap().to_string()
    };
    let kinds: [(&str, &[&str], &str); 5] = [
        ("m", &[], "exclusive"),
        ("f", &["--fair"], "exclusive"),
        ("r", &["--read"], "read"),
        ("w", &["--write"], "exclusive"),
        ("s", &["--permits", "2"], "semaphore"),
    ];
    for (name, kind, shown) in kinds {
        let token = take(name, kind);
        let mut extend = vec!["extend", name, &token, "--ttl", "60s"];
        extend.extend_from_slice(kind);
        assert_eq!(code(dlock(&server).args(&extend)), 0, "{name}");
        let out = output(dlock(&server).args(["inspect", name, "--json"]));
        assert_eq!(out.status.code(), Some(0));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["kind"], shown, "{info}");
        assert_eq!(info["holders"].as_array().unwrap().len(), 1, "{info}");
        let holder = &info["holders"][0];
        assert!(
            holder["pid"].as_u64().unwrap() > 0,
            "a dlock holder names its pid: {info}"
        );
        assert!(holder["host"].as_str().is_some());
        assert!(
            holder["remaining_ms"].as_u64().unwrap() > 50_000,
            "extended: {info}"
        );
        assert!(info["last_fence"].as_u64().unwrap() > 1, "{info}");
        let mut release = vec!["release", name, &token];
        release.extend_from_slice(kind);
        assert_eq!(code(dlock(&server).args(&release)), 0, "{name}");
        assert_eq!(code(dlock(&server).args(&release)), 77, "{name}: only once");
        let out = output(dlock(&server).args(["inspect", name, "--json"]));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["kind"], "free");
    }
    // --match finds locks with SCAN and leaves out companion keys.
    take("batch:1", &[]);
    take("batch:2", &["--read"]);
    let out = output(dlock(&server).args(["inspect", "--match", "batch:*", "--json"]));
    let names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["batch:1", "batch:2"]);
    let table = output(dlock(&server).args(["inspect", "batch:1"]));
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("batch:1") && text.contains("dlock pid"),
        "{text}"
    );
}

#[test]
fn inspect_as_prometheus_text_names_who_holds_what() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args(["acquire", "jobs:held", "--ttl", "30s"]));
    assert_eq!(out.status.code(), Some(0));
    let token = String::from_utf8(out.stdout).unwrap();
    let token = token.split_whitespace().next().unwrap().to_string();
    assert_eq!(
        code(dlock(&server).args(["acquire", "jobs:fair", "--fair", "--ttl", "30s"])),
        0
    );
    // A waiter in the fair lock's queue, in a process of its own.
    let mut waiter = dlock(&server)
        .args(["acquire", "jobs:fair", "--fair", "--wait", "20s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let scrape = || {
        let out = output(dlock(&server).args(["inspect", "--match", "jobs:*", "--prometheus"]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = scrape();
        if text.contains("dlock_lock_queue_length{lock=\"jobs:fair\"} 1") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no queued waiter:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = waiter.kill();
    let _ = waiter.wait();

    // The exposition format: each family's HELP and TYPE, then its samples, each
    // `name{labels} value` with a number for the value.
    let mut family = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            family = rest.split(' ').next().unwrap().to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            assert_eq!(rest, format!("{family} gauge"));
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(
            series.starts_with(&format!("{family}{{")),
            "{line} outside {family}"
        );
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
    }
    let sample = |series: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(sample("dlock_lock_held{lock=\"jobs:held\"}"), 1.0);
    assert_eq!(sample("dlock_lock_holders{lock=\"jobs:held\"}"), 1.0);
    let lease = sample("dlock_lock_lease_remaining_seconds{lock=\"jobs:held\"}");
    assert!(lease > 0.0 && lease <= 30.0, "{lease}");
    assert!(sample("dlock_lock_last_fence{lock=\"jobs:held\"}") > 1.0);
    assert_eq!(
        sample("dlock_lock_info{lock=\"jobs:held\",kind=\"exclusive\"}"),
        1.0
    );
    // A name given twice is shown once: a repeated series is refused by scrapers.
    let out = output(dlock(&server).args(["inspect", "jobs:held", "jobs:held", "--prometheus"]));
    let twice = String::from_utf8(out.stdout).unwrap();
    let series: Vec<&str> = twice.lines().filter(|l| !l.starts_with('#')).collect();
    let mut unique = series.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(series.len(), unique.len(), "{twice}");
    assert!(
        twice.contains("dlock_lock_held{lock=\"jobs:held\"} 1"),
        "{twice}"
    );
    // Who holds it: the token's prefix and the dlock process.
    let holder = text
        .lines()
        .find(|line| {
            line.starts_with("dlock_lock_holder_lease_remaining_seconds{lock=\"jobs:held\"")
        })
        .unwrap_or_else(|| panic!("no holder series:\n{text}"));
    let shown = holder
        .split("token=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        shown.len() >= 8 && token.contains(shown),
        "{shown} of {token}"
    );
    assert!(holder.contains("holder=\"dlock pid "), "{holder}");

    // Released: --match no longer finds it; by name it is free, with no lease and no
    // holder series.
    assert_eq!(
        code(dlock(&server).args(["release", "jobs:held", &token])),
        0
    );
    assert!(!scrape().contains("lock=\"jobs:held\""));
    let out = output(dlock(&server).args(["inspect", "jobs:held", "--prometheus"]));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("dlock_lock_held{lock=\"jobs:held\"} 0")
            && text.contains("dlock_lock_info{lock=\"jobs:held\",kind=\"free\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("dlock_lock_lease_remaining_seconds{lock=\"jobs:held\""),
        "{text}"
    );
    assert!(
        !text.contains("dlock_lock_holder_lease_remaining_seconds{lock=\"jobs:held\""),
        "{text}"
    );
    // Not with --json or --watch: a usage error.
    assert_eq!(
        code(dlock(&server).args(["inspect", "x", "--prometheus", "--json"])),
        64
    );
}

#[test]
fn a_forced_release_bumps_the_fence() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args(["acquire", "job"]));
    let line = String::from_utf8(out.stdout).unwrap();
    let fence: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    // Only by name, and only when asked for.
    assert_eq!(code(dlock(&server).args(["release", "job"])), 64);
    assert_eq!(
        code(dlock(&server).args(["release", "--force", "job", "--read"])),
        64
    );
    let forced = output(dlock(&server).args(["release", "--force", "job"]));
    assert_eq!(forced.status.code(), Some(0));
    let new_fence: u64 = String::from_utf8(forced.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(new_fence > fence, "the evicted holder's fence is now stale");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);
    let next = output(dlock(&server).args(["acquire", "job", "--no-wait"]));
    let next_fence: u64 = String::from_utf8(next.stdout)
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(next_fence > new_fence);
    // Forcing a free name changes nothing.
    let _: i64 = server.cmd(&["DEL", "job"]);
    assert_eq!(code(dlock(&server).args(["release", "--force", "job"])), 0);
    let counter: u64 = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(counter, next_fence);
}

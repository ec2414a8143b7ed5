//! `dlock elect` and `dlock leader` across OS processes: one leader at a time, the next
//! one with a larger term once the first exits, `--watch` printing each change, a killed
//! leader replaced within its lease.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::RedisServer;

mod common;
use common::{code, dlock, output};

fn leader_json(server: &RedisServer) -> serde_json::Value {
    let out = output(dlock(server).args(["leader", "--json", "jobs"]));
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn elect(server: &RedisServer, value: &str, script: &str) -> Child {
    dlock(server)
        .args([
            "elect", "jobs", "--value", value, "--ttl", "1s", "--", "sh", "-c", script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn the_second_candidate_leads_with_a_larger_term_once_the_first_exits() {
    let server = RedisServer::start();
    assert_eq!(leader_json(&server), serde_json::Value::Null);
    let dir = tempfile::tempdir().unwrap();
    let stop_first = dir.path().join("stop-first");

    let mut watch = dlock(&server)
        .args(["leader", "--watch", "--json", "jobs"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert_eq!(watched.next().unwrap().unwrap(), "null");

    let first = elect(
        &server,
        "first",
        &format!(
            "echo $DLOCK_TERM; while [ ! -e {} ]; do sleep 0.05; done",
            stop_first.display()
        ),
    );
    wait_for("the first leads", || {
        leader_json(&server)["value"] == "first"
    });
    let first_term = leader_json(&server)["term"].as_u64().unwrap();
    let second = elect(&server, "second", "echo $DLOCK_TERM; sleep 0.2");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        leader_json(&server)["value"],
        "first",
        "two leaders at once"
    );

    std::fs::write(&stop_first, "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success());
    assert_eq!(
        String::from_utf8(first.stdout).unwrap().trim(),
        first_term.to_string(),
        "DLOCK_TERM is the leader's term"
    );
    let second = second.wait_with_output().unwrap();
    assert!(second.status.success());
    let second_term: u64 = String::from_utf8(second.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(second_term > first_term);

    // --watch printed the first, the step-down, the second (and its step-down).
    let mut seen = Vec::new();
    for line in watched.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("\"second\"") {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen[0].contains("\"first\"") && seen[0].contains(&first_term.to_string()),
        "{seen:?}"
    );
    assert!(
        seen.last().unwrap().contains(&second_term.to_string()),
        "{seen:?}"
    );
    assert_eq!(leader_json(&server), serde_json::Value::Null);
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease() {
    let server = RedisServer::start();
    let mut first = elect(&server, "doomed", "sleep 60");
    wait_for("the first leads", || {
        leader_json(&server)["value"] == "doomed"
    });
    first.kill().unwrap(); // kill -9 of dlock: its watchdog stops the command
    let _ = first.wait();
    let killed_at = Instant::now();
    let next = elect(&server, "next", "sleep 0.2");
    let next = next.wait_with_output().unwrap();
    assert!(next.status.success(), "{next:?}");
    // The lease is 1 s: the next leader took over about then (generous for a loaded CI).
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "{:?}",
        killed_at.elapsed()
    );
}

#[test]
fn bad_values_and_other_kinds_are_refused() {
    let server = RedisServer::start();
    assert_eq!(
        code(dlock(&server).args(["elect", "jobs", "--value", "a\nb", "--", "true"])),
        64
    );
    let held = output(dlock(&server).args(["acquire", "pool", "--permits", "2"]));
    assert!(held.status.success());
    assert_eq!(code(dlock(&server).args(["leader", "pool"])), 65);
    // A watch with nowhere to print would never end: refused at once.
    let mut closed = dlock(&server);
    closed.args(["leader", "--watch", "jobs"]);
    // SAFETY: closing fd 1 in the child before exec only affects the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut closed, || {
            libc::close(1);
            Ok(())
        });
    }
    assert_eq!(closed.status().unwrap().code(), Some(74));
}

#[test]
fn elect_and_leader_refuse_several_masters() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    for args in [
        &["elect", "jobs", "--value", "x", "--", "true"][..],
        &["leader", "jobs"],
    ] {
        let refused = code(
            dlock(&server)
                .env_remove("DLOCK_REDIS")
                .args(["--redis", &server.url(), "--redis", &other.url()])
                .args(args),
        );
        assert_eq!(refused, 64, "{args:?}");
    }
}

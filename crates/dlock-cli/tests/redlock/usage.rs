//! What several masters refuse (other kinds, deployment flags), and one URL in
//! `DLOCK_REDIS` still being one server.

use dlock_testkit::RedisServer;

use crate::{dlock, over, run, NOWHERE};

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

//! `--permits N --take K` (weighted permits) through the `dlock` binary against a real
//! redis-server: the weight held across OS processes, usage errors, what is reported.

use std::path::Path;

use dlock_testkit::RedisServer;

mod common;
use common::{code, dlock, output};

/// Six processes, three rounds each, take 1, 2 or 3 of 4 permits through `dlock run
/// --permits 4 --take K` (or, `guarded` false, through `--permits 4` alone, one permit
/// each whatever they use). Each holder marks the K slots it uses and logs how many are
/// marked; returns the most seen.
fn most_weight_across_processes(server: &RedisServer, dir: &Path, guarded: bool) -> usize {
    let slots = dir.join("slots");
    std::fs::create_dir_all(&slots).unwrap();
    let log = dir.join("counts");
    // $W is the weight the test gave; a guarded run must export the same as DLOCK_WEIGHT.
    let script = format!(
        "set -e; if [ -n \"$CHECK\" ] && [ \"$DLOCK_WEIGHT\" != \"$W\" ]; then exit 9; fi; \
         for i in $(seq $W); do touch {s}/$$.$i; done; ls {s} | wc -l >> {log}; \
         sleep 0.05; rm {s}/$$.*",
        s = slots.display(),
        log = log.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|worker| {
            let weight = (1 + worker % 3).to_string();
            let mut command = dlock(server);
            command.args(["run", "gpu", "--permits", "4", "--ttl", "5s"]);
            if guarded {
                command.args(["--take", &weight]).env("CHECK", "1");
            }
            command.args(["--", "sh", "-c", &script]).env("W", &weight);
            std::thread::spawn(move || {
                for _ in 0..3 {
                    assert_eq!(command.status().unwrap().code(), Some(0));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let counts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(counts.lines().count(), 18);
    counts
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap()
}

#[test]
fn processes_taking_k_of_n_never_hold_more_than_n() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let most = most_weight_across_processes(&server, dir.path(), true);
    assert!(
        (3..=4).contains(&most),
        "{most} of 4 permits in use at once"
    );
}

#[test]
fn negative_control_one_permit_each_lets_the_weight_exceed_n() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    assert!(most_weight_across_processes(&server, dir.path(), false) > 4);
}

#[test]
fn take_without_permits_or_out_of_range_is_a_usage_error() {
    let server = RedisServer::start();
    for (args, says) in [
        (&["--take", "2"][..], "needs --permits N"),
        (&["--permits", "4", "--take", "0"], "use 1 to 4"),
        (&["--permits", "4", "--take", "5"], "use 1 to 4"),
    ] {
        for verb in [&["run", "gpu"][..], &["acquire", "gpu"]] {
            let mut command = dlock(&server);
            command.args(verb).args(args);
            if verb[0] == "run" {
                command.args(["--", "true"]);
            }
            let out = output(&mut command);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{verb:?} {args:?}: {stderr}");
            assert!(stderr.contains(says), "{verb:?} {args:?}: {stderr}");
        }
    }
    // Nothing was taken.
    assert_eq!(server.cmd::<i64>(&["EXISTS", "gpu"]), 0);
    // --take goes with --permits, not instead of another kind flag.
    assert_eq!(
        code(dlock(&server).args(["run", "gpu", "--fair", "--permits", "2", "--", "true"])),
        64
    );
}

#[test]
fn acquire_and_inspect_report_the_weight() {
    let server = RedisServer::start();
    let out =
        output(dlock(&server).args(["acquire", "gpu", "--permits", "4", "--take", "3", "--json"]));
    assert_eq!(out.status.code(), Some(0));
    let taken: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(taken["weight"], 3, "{taken}");
    // One more fits; two more do not, and the message says why.
    assert_eq!(
        code(dlock(&server).args(["acquire", "gpu", "--permits", "4", "-n"])),
        0
    );
    let busy =
        output(dlock(&server).args(["acquire", "gpu", "--permits", "4", "--take", "2", "-n"]));
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert_eq!(busy.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("fewer than 2 of its 4 permits"), "{stderr}");
    let table = output(dlock(&server).args(["inspect", "gpu"]));
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(text.matches("takes 3 permits").count(), 1, "{text}");
    let json = output(dlock(&server).args(["inspect", "gpu", "--json"]));
    let info: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let mut weights: Vec<u64> = info["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["weight"].as_u64().unwrap())
        .collect();
    weights.sort();
    assert_eq!(weights, [1, 3]);
    // Released by its token like any permit: all three come back.
    let token = taken["token"].as_str().unwrap();
    assert_eq!(
        code(dlock(&server).args(["release", "gpu", token, "--permits", "4"])),
        0
    );
    assert_eq!(
        code(dlock(&server).args(["acquire", "gpu", "--permits", "4", "--take", "3", "-n"])),
        0
    );
}

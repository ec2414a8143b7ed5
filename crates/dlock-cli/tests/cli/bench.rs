//! `dlock bench`: every scenario with its baseline, and `--spawn`'s private server.

use std::process::{Command, Stdio};

use dlock_testkit::RedisServer;

use crate::common::{dlock, output};

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

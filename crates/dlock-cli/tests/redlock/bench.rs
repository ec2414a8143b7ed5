//! `dlock bench` over the named masters: the Redlock scenarios alone, no keys left behind
//! even when interrupted.

use std::process::Stdio;
use std::time::Duration;

use crate::{over, run, three_masters, urls};

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

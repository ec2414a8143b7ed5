//! Mutual exclusion across OS processes over three masters, with its negative control.

use std::path::Path;
use std::process::Stdio;

use crate::{over, three_masters, urls};

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

//! Fenced resources made easy, for files: `examples/fenced-write.sh` replaces a file only
//! for a fence at least the last it accepted. A script that took the lock with
//! `dlock acquire` and paused past the lease writes late with its older fence, after a
//! `dlock run` command wrote with `$DLOCK_FENCE`: refused (exit 77), the newer content
//! stands. The negative control writes the same way without the check and overwrites it.

use std::process::{Command, Stdio};
use std::time::Duration;

use dlock_testkit::RedisServer;

mod common;
use common::{dlock, output};

const FENCED_WRITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fenced-write.sh");

/// The late write of a paused holder, fenced or not. Returns its exit code and the file.
fn paused_script_writes_late(fenced: bool) -> (Option<i32>, String) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    let writer = if fenced {
        format!("{FENCED_WRITE} {}", file.display())
    } else {
        format!("cat > {}", file.display())
    };

    let acquired = output(dlock(&server).args(["acquire", "report", "--ttl", "300ms"]));
    assert!(acquired.status.success(), "{acquired:?}");
    let line = String::from_utf8(acquired.stdout).unwrap();
    let stale_fence = line.split_whitespace().nth(1).unwrap().to_string();
    std::thread::sleep(Duration::from_millis(500)); // the pause, past the lease

    let newer = output(dlock(&server).args([
        "run",
        "report",
        "--",
        "sh",
        "-c",
        &format!("echo newer | {writer}"),
    ]));
    assert!(newer.status.success(), "{newer:?}");

    let late = Command::new("sh")
        .args(["-c", &format!("echo late | {writer}")])
        .env("DLOCK_FENCE", &stale_fence)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let content = std::fs::read_to_string(&file).unwrap();
    (late.status.code(), content)
}

#[test]
fn a_paused_scripts_late_file_write_is_refused() {
    let (code, content) = paused_script_writes_late(true);
    assert_eq!(code, Some(77));
    assert_eq!(content, "newer\n");
}

#[test]
fn negative_control_an_unfenced_file_takes_the_late_write() {
    let (code, content) = paused_script_writes_late(false);
    assert_eq!(code, Some(0));
    assert_eq!(
        content, "late\n",
        "the check must be able to see a late write land"
    );
}

/// Bad use: no file, no fence or a fence that is no number (exit 64, nothing written).
#[test]
fn fenced_write_refuses_bad_use() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    for (args, fence) in [
        (vec![], Some("5")),
        (vec![file.to_str().unwrap()], None),
        (vec![file.to_str().unwrap()], Some("12ab")),
    ] {
        let mut command = Command::new(FENCED_WRITE);
        command
            .args(&args)
            .env_remove("DLOCK_FENCE")
            .stdin(Stdio::null());
        if let Some(fence) = fence {
            command.env("DLOCK_FENCE", fence);
        }
        assert_eq!(
            command.output().unwrap().status.code(),
            Some(64),
            "{args:?} {fence:?}"
        );
    }
    assert!(!file.exists());
}

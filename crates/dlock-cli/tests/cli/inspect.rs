//! `dlock inspect`: keys that are no lock's skipped, and its columns.

use std::process::Command;

use dlock_testkit::RedisServer;

use crate::common::{code, dlock, output};

/// A key that is not UTF-8 among dlock's locks is no lock's (dlock writes none such): the
/// scan of `inspect --match` skips it, and `-v` says how many it skipped. Before, one such
/// key made `inspect --match`, `--json` and `--prometheus` exit 76 and list nothing.
#[test]
fn a_key_that_is_not_utf8_is_skipped_by_inspect_match() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "odd:job"])), 0);
    assert_eq!(
        code(dlock(&server).args(["acquire", "odd:pool", "--permits", "2"])),
        0
    );
    let _: () = redis::cmd("SET")
        .arg(&b"odd:bin\xff"[..])
        .arg("x")
        .query(&mut server.connection())
        .unwrap();
    for view in [&[][..], &["--json"], &["--prometheus"]] {
        let out = output(
            dlock(&server)
                .args(["inspect", "--match", "odd:*"])
                .args(view)
                .env_remove("RUST_LOG"),
        );
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{view:?}: {stderr}");
        assert!(
            stdout.contains("odd:job") && stdout.contains("odd:pool"),
            "{view:?}: {stdout}"
        );
        assert!(!stdout.contains("odd:bin"), "{view:?}: {stdout}");
        assert!(
            !stderr.contains("skipped"),
            "{view:?}: said without -v: {stderr}"
        );
    }
    let out = output(
        dlock(&server)
            .args(["-v", "inspect", "--match", "odd:*"])
            .env_remove("RUST_LOG"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("skipped 1 key"), "{stderr}");
}

#[test]
fn inspect_columns_fit_clock_floor_fences_and_say_what_is_queued() {
    let server = RedisServer::start();
    assert_eq!(code(dlock(&server).args(["acquire", "job"])), 0);
    let out = output(dlock(&server).args(["inspect", "job"]));
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    let fence: String = server.cmd(&["GET", "{job}:fence"]);
    assert!(fence.len() >= 16, "a clock-floor fence: {fence}");
    let header_end = lines[0].find("FENCE").unwrap() + "FENCE".len();
    let row_end = lines[1].find(&fence).unwrap() + fence.len();
    assert_eq!(header_end, row_end, "FENCE stays in its column:\n{table}");
    let help = output(Command::new(env!("CARGO_BIN_EXE_dlock")).args(["inspect", "--help"]));
    let help = crate::common::flat(&String::from_utf8_lossy(&help.stdout));
    assert!(help.contains("not its readers"), "{help}");
}

/// `inspect` with neither names nor `--match` says how to see every lock; and `--watch`
/// into a pipe or a file writes plain frames: the clear-screen codes are for a terminal.
#[test]
fn inspect_without_names_says_match_and_a_watch_into_a_pipe_is_plain_text() {
    let server = RedisServer::start();
    let out = output(dlock(&server).arg("inspect"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--match '*'"), "{stderr}");

    assert_eq!(code(dlock(&server).args(["acquire", "shown"])), 0);
    let mut child = dlock(&server)
        .args(["inspect", "--watch", "100ms", "shown"])
        .stdout(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Two frames: read until the second header, then stop reading (the watch ends).
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while String::from_utf8_lossy(&seen)
        .matches("dlock inspect —")
        .count()
        < 2
    {
        let n = std::io::Read::read(&mut stdout, &mut chunk).unwrap();
        assert!(
            n > 0,
            "the watch ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&chunk[..n]);
    }
    drop(stdout);
    let _ = child.wait();
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("shown"), "{text}");
    assert!(!text.contains('\x1b'), "escape codes into a pipe: {text:?}");
}

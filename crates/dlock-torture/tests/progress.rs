//! `dlock-torture` shows a bar per scenario with its round on a terminal (run here under
//! `script(1)`, which gives it one), and plain lines otherwise.

use std::process::{Command, Stdio};

/// One short scenario (one round, one lock kind), with stderr on a terminal or a pipe.
/// Returns what it wrote to stderr (and, under `script`, stdout).
fn one_round(on_a_terminal: bool) -> String {
    let torture = env!("CARGO_BIN_EXE_dlock-torture");
    let args = "--scenario holder-crash --rounds 1 --primitive mutex";
    let output = if on_a_terminal {
        Command::new("script")
            .args(["-qec", &format!("{torture} {args}"), "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .expect("script(1) from util-linux")
    } else {
        Command::new(torture)
            .args(args.split(' '))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // The verdict does not matter here (one round may not give every kind of client a
    // turn): only that the run ended, judged.
    assert!(matches!(output.status.code(), Some(0 | 1)), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout)
}

#[test]
fn a_terminal_gets_a_bar_with_the_round_and_a_pipe_gets_plain_lines() {
    let terminal = one_round(true);
    assert!(terminal.contains("round 1/1"), "{terminal}");
    assert!(terminal.contains("[1/1] holder-crash: "), "{terminal}");
    let piped = one_round(false);
    assert!(piped.contains("[1/1] holder-crash ...\n"), "{piped}");
    assert!(
        !piped.contains("round 1/1") && !piped.contains('\r'),
        "{piped}"
    );
}

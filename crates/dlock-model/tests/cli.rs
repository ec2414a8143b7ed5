//! The `dlock-model` command as CI and a reader use it: `mutants` lists every deliberate
//! bug, `check --mutant` exits 1 with a VIOLATED property when the bug is caught, a clean
//! check exits 0, and a name it does not know is a usage error (64). (That each bug is
//! caught by the property it targets is tests/check.rs's; this is the command around it.)

use std::process::{Command, Output};

use dlock_model::mutant::Mutant;

fn model(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlock-model"))
        .args(args)
        .output()
        .expect("dlock-model runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn mutants_lists_every_deliberate_bug_once() {
    let out = model(&["mutants"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    let known: Vec<String> = Mutant::ALL.iter().map(|m| m.name().to_string()).collect();
    assert_eq!(listed, known);
}

#[test]
fn a_caught_bug_exits_1_with_its_violated_property_and_the_clean_model_exits_0() {
    // The election model is the smallest: a fence handed out twice makes terms stall.
    let caught = model(&["check", "--mutant", "fence-reused", "--only", "election"]);
    let report = text(&caught.stdout);
    assert_eq!(caught.status.code(), Some(1), "{report}");
    assert!(report.contains("VIOLATED      terms rise"), "{report}");
    let clean = model(&["check", "--only", "election"]);
    let report = text(&clean.stdout);
    assert_eq!(clean.status.code(), Some(0), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
}

#[test]
fn an_unknown_mutant_is_a_usage_error() {
    let out = model(&["check", "--mutant", "no-such-bug"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("no mutant named 'no-such-bug'"));
}
